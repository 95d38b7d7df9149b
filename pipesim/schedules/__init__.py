"""The schedule IR and the generators of every schedule pipesim covers.

>>> from pipesim.schedules import build
>>> schedule = build("1f1b", devices=2, microbatches=3)
>>> [str(a) for a in schedule.device_actions[1]]
['1F0', '1B0', '1F1', '1B1', '1F2', '1B2']
"""

from pipesim.errors import ScheduleError
from pipesim.schedules.action import Action, Kind, parse_action
from pipesim.schedules.csvio import from_csv, read_csv, to_csv
from pipesim.schedules.layout import render_schedule, unit_slots
from pipesim.schedules.registry import (
    ScheduleInfo,
    build,
    schedule_info,
    schedule_names,
    unsupported_reason,
)
from pipesim.schedules.schedule import Schedule, UpdateRule
from pipesim.schedules.validator import validate

__all__ = [
    "Action",
    "Kind",
    "Schedule",
    "ScheduleError",
    "ScheduleInfo",
    "UpdateRule",
    "build",
    "from_csv",
    "parse_action",
    "read_csv",
    "render_schedule",
    "schedule_info",
    "schedule_names",
    "to_csv",
    "unit_slots",
    "unsupported_reason",
    "validate",
]
