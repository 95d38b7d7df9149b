"""Chrome Trace Event Format JSON (opens in Perfetto and chrome://tracing).

One process per run; one track (thread) per device and one per link channel; complete events
("ph": "X") with microsecond timestamps; a memory counter per device when memory is given.
Works on the records of simulated and measured runs alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipesim.engine.records import ComputeRecord, TransferRecord

_MICROSECONDS = 1e6
_CATEGORY = {"F": "forward", "B": "backward", "I": "backward-input", "W": "backward-weight"}


def chrome_trace(
    compute: Sequence[ComputeRecord],
    transfers: Sequence[TransferRecord],
    devices: int,
    *,
    title: str = "pipesim",
    memory: Sequence[Sequence[tuple[float, float]]] | None = None,
) -> dict[str, Any]:
    """The trace as a JSON-ready object: ``{"traceEvents": [...], "displayTimeUnit": "ms"}``.

    ``memory[d]`` is device d's (time_s, bytes) curve, shown as a counter track.
    """
    pid = 0
    channels = sorted({c for t in transfers for c in t.channels})
    channel_tid = {name: devices + index for index, name in enumerate(channels)}
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": title}}
    ]
    for device in range(devices):
        events.append(_thread_name(pid, device, f"device {device}"))
        events.append(_sort_index(pid, device, device))
    for name, tid in channel_tid.items():
        events.append(_thread_name(pid, tid, name))  # the channel names its link already
        events.append(_sort_index(pid, tid, tid))
    for record in compute:
        kind = "optimizer" if record.action is None else _CATEGORY[record.action.kind.value]
        args: dict[str, Any] = {"step": record.step}
        if record.action is not None:
            args.update(stage=record.action.stage, microbatch=record.action.microbatch)
        events.append(
            {
                "name": record.label,
                "cat": kind,
                "ph": "X",
                "ts": record.start_s * _MICROSECONDS,
                "dur": record.duration_s * _MICROSECONDS,
                "pid": pid,
                "tid": record.device,
                "args": args,
            }
        )
    for transfer in transfers:
        for channel in transfer.channels or ("local",):
            events.append(
                {
                    "name": transfer.label,
                    "cat": transfer.kind,
                    "ph": "X",
                    "ts": transfer.start_s * _MICROSECONDS,
                    "dur": (transfer.end_s - transfer.start_s) * _MICROSECONDS,
                    "pid": pid,
                    "tid": channel_tid.get(channel, transfer.source_device),
                    "args": {
                        "step": transfer.step,
                        "bytes": transfer.size_bytes,
                        "from_device": transfer.source_device,
                        "to_device": transfer.destination_device,
                        "queued_us": transfer.queued_s * _MICROSECONDS,
                    },
                }
            )
    for device, curve in enumerate(memory or ()):
        for time_s, size in curve:
            events.append(
                {
                    "name": f"memory device {device}",
                    "ph": "C",
                    "ts": time_s * _MICROSECONDS,
                    "pid": pid,
                    "args": {"bytes": size},
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _thread_name(pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def _sort_index(pid: int, tid: int, index: int) -> dict[str, Any]:
    return {
        "name": "thread_sort_index",
        "ph": "M",
        "pid": pid,
        "tid": tid,
        "args": {"sort_index": index},
    }
