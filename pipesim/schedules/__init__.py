"""The schedule IR and the generators of every schedule pipesim covers.

>>> from pipesim.schedules import build
>>> schedule = build("1f1b", devices=2, microbatches=3)
>>> [str(a) for a in schedule.device_actions[1]]
['1F0', '1B0', '1F1', '1B1', '1F2', '1B2']

Each name below loads its module on first use (:mod:`pipesim.common.lazy`): importing
:mod:`pipesim.schedules.action` for :class:`UpdateRule` does not load numpy.
"""

from typing import TYPE_CHECKING

from pipesim.common.lazy import lazy_exports

if TYPE_CHECKING:
    from pipesim.errors import ScheduleError
    from pipesim.schedules.action import Action, Kind, UpdateRule, parse_action
    from pipesim.schedules.csvio import from_csv, read_csv, to_csv
    from pipesim.schedules.layout import render_schedule, unit_slots
    from pipesim.schedules.registry import (
        ScheduleInfo,
        build,
        schedule_info,
        schedule_names,
        unsupported_reason,
    )
    from pipesim.schedules.schedule import Schedule
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

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ScheduleError": "pipesim.errors",
        "Action": "pipesim.schedules.action",
        "Kind": "pipesim.schedules.action",
        "parse_action": "pipesim.schedules.action",
        "from_csv": "pipesim.schedules.csvio",
        "read_csv": "pipesim.schedules.csvio",
        "to_csv": "pipesim.schedules.csvio",
        "render_schedule": "pipesim.schedules.layout",
        "unit_slots": "pipesim.schedules.layout",
        "ScheduleInfo": "pipesim.schedules.registry",
        "build": "pipesim.schedules.registry",
        "schedule_info": "pipesim.schedules.registry",
        "schedule_names": "pipesim.schedules.registry",
        "unsupported_reason": "pipesim.schedules.registry",
        "Schedule": "pipesim.schedules.schedule",
        "UpdateRule": "pipesim.schedules.action",
        "validate": "pipesim.schedules.validator",
    },
)
