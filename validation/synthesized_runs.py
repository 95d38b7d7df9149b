"""Synthesised schedules in a validation case: ``synth N=<limit>`` among a case's schedules.

A synthesised order depends on costs, so a case makes it from what it measured before its
rounds: every stage's isolated profile and the ping-pong link (the same on every rank, which
all gather them), one stage per device. Rank 0 synthesises and hands the order to the others,
the rounds run it like any other schedule, and the measurement records the order itself
(:attr:`~validation.schema.RunMeasurement.order`): the prediction simulates the very order that
ran, also when ``--reuse`` re-predicts after the synthesiser has changed.
"""

from __future__ import annotations

from collections.abc import Sequence

from executor.profile import LinkProfile, StageProfile, calibrated_costs
from pipesim.errors import LimitError
from pipesim.parallel.placement import looped
from pipesim.schedules import Schedule, build
from pipesim.schedules.action import parse_action
from pipesim.sweep.grid import synth_limit
from pipesim.synthesis.synthesis import SYNTH_NAME, check_synthesis_size, synthesize

__all__ = ["order_of", "run_schedule", "synth_limit", "synthesized", "unsupported"]


def unsupported(name: str, devices: int, microbatches: int) -> str | None:
    """Why ``synth N=<limit>`` cannot run at this K and M (None when it can)."""
    if synth_limit(name) is None:
        return f"{name!r} is not a synthesised schedule (synth N=<limit>)"
    try:
        check_synthesis_size(devices, microbatches)
    except LimitError as error:
        return str(error)
    return None


def synthesized(
    profiles: Sequence[StageProfile],
    link: LinkProfile,
    devices: int,
    microbatches: int,
    limit: int,
) -> Schedule:
    """The order synthesised for these measured costs (one stage per device)."""
    costs = calibrated_costs(list(profiles), link, devices)
    return synthesize(costs, microbatches, limit).schedule


def order_of(schedule: Schedule) -> tuple[tuple[str, ...], ...]:
    """Each device's order as action strings (``0F1``), as a measurement records it."""
    return tuple(tuple(str(a) for a in row) for row in schedule.device_actions)


def run_schedule(
    name: str,
    devices: int,
    microbatches: int,
    chunks: int,
    order: Sequence[Sequence[str]] = (),
) -> Schedule:
    """The schedule a run stepped: its recorded order when it has one (a synthesised run),
    else the registered schedule ``name``; validated either way."""
    if not order:
        return build(name, devices, microbatches, chunks)
    rows = tuple(tuple(parse_action(text) for text in row) for row in order)
    return Schedule(SYNTH_NAME, microbatches, looped(devices, chunks), rows)
