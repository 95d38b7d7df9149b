"""The discrete-event engines and their results."""

from pipesim.engine.durations import action_duration_s
from pipesim.engine.records import ComputeRecord, Timeline, TransferRecord
from pipesim.engine.result import DeviceSummary, SimulationResult
from pipesim.engine.simulate import Engine, simulate, warm_up

__all__ = [
    "ComputeRecord",
    "DeviceSummary",
    "Engine",
    "SimulationResult",
    "Timeline",
    "TransferRecord",
    "action_duration_s",
    "simulate",
    "warm_up",
]
