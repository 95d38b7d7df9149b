"""The typed records that cross the validation boundary, and their JSON.

What a case's processes measured (:class:`CaseMeasurement`, written to
``measured-<case>.json`` and read back by ``--reuse``), what comparing it with the simulator
gives (:class:`Comparison`, :class:`CrosscheckRecord`, :class:`Summary`, in ``results.json``).
Every record is a frozen dataclass with ``to_json`` and ``from_json``; the JSON keys are the
field names. A file that lacks a field (one written by an older pipesim) is refused with one
line naming the field, never a ``KeyError``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from executor.profile import LinkProfile, StageProfile
from pipesim.errors import PipesimError
from validation.fields import require
from validation.host import HostLoad
from validation.suites import Case
from validation.typed_json import FieldRules, decode

R = TypeVar("R")


def _tuples(value: Any) -> Any:
    """JSON lists as tuples, recursively (records are immutable)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def _flat_from_json(cls: type[R], data: object, where: str) -> R:
    """A record whose fields are JSON values (numbers, strings, None, lists as tuples)."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.default is not dataclasses.MISSING and isinstance(data, dict) and f.name not in data:
            continue  # a field added later, with a default: older files read
        value = _tuples(require(data, f.name, where))
        if hints[f.name] is float and isinstance(value, int):
            value = float(value)
        values[f.name] = value
    return cls(**values)


def _flat_to_json(record: object) -> dict[str, Any]:
    return {
        f.name: _lists(getattr(record, f.name))
        for f in dataclasses.fields(record)  # type: ignore[arg-type]
    }


def _lists(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_lists(v) for v in value]
    return value


@dataclass(frozen=True)
class Machine:
    """The machine and software a case ran on."""

    platform: str
    processor: str
    cores: int | None
    python: str
    torch: str
    threads_per_process: int
    gpu: str | None = None
    lanes: str | None = None  # the partitioned backends' lanes, in words

    def to_json(self) -> dict[str, Any]:
        """Every field."""
        return _flat_to_json(self)

    @classmethod
    def from_json(cls, data: object) -> Machine:
        """The inverse of :meth:`to_json`."""
        return _flat_from_json(cls, data, "machine")


@dataclass(frozen=True)
class RunMeasurement:
    """One schedule at one M, measured over the case's rounds (rank 0's view of all ranks).

    Attributes:
        step_times_s: the span of each measured step (first action start to last action end).
        wall_times_s: each step's wall time on rank 0 (barrier to return).
        peak_stash_bytes: per device, the most activation bytes the executor's own meter
            counted as stashed at once (the executor's bookkeeping, not a measurement).
        peak_allocated_bytes: per device, ``torch.cuda.max_memory_allocated`` (None on CPU).
        peak_rss_bytes: per device, how far the process's resident memory rose above its level
            at the step's start during one extra, untimed step (the kernel's high-water mark,
            after returning the allocator's free memory to it): a measurement of what the step
            allocated that owes nothing to the executor's count. None where not measured.
        timeline: (device, step, action or None, start_s, end_s) of the step whose span was the
            median.
        order: each device's order as action strings, for a schedule synthesised in the case
            (:mod:`validation.synthesized_runs`); empty for a registered schedule, which its
            name rebuilds.
        device_peak_bytes: the partitioned backends, whose lanes share one memory: the whole
            machine's peak during one extra, untimed step. On CUDA the allocator's peak less
            what was resident before the step, plus the model's weights and gradients; on CPU
            the process's resident-memory rise. None for the other backends.
    """

    schedule: str
    devices: int
    microbatches: int
    chunks: int
    step_times_s: tuple[float, ...]
    wall_times_s: tuple[float, ...]
    peak_stash_bytes: tuple[int, ...]
    peak_allocated_bytes: tuple[int | None, ...]
    peak_rss_bytes: tuple[int | None, ...]
    timeline: tuple[tuple[int, int, str | None, float, float], ...]
    order: tuple[tuple[str, ...], ...] = ()
    device_peak_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        """Every field (tuples as lists)."""
        return _flat_to_json(self)

    @classmethod
    def from_json(cls, data: object) -> RunMeasurement:
        """The inverse of :meth:`to_json`."""
        return _flat_from_json(cls, data, "measured run")


@dataclass(frozen=True)
class CrosscheckMeasurement:
    """One schedule on both runtimes: pipesim's executor and ``torch.distributed.pipelining``
    (wall-clock step times on rank 0, after warm-up), and how far their gradients differ."""

    schedule: str
    torch_class: str
    devices: int
    microbatches: int
    chunks: int
    ours_wall_times_s: tuple[float, ...]
    torch_wall_times_s: tuple[float, ...]
    gradient_max_relative_error: float

    def to_json(self) -> dict[str, Any]:
        """Every field (tuples as lists)."""
        return _flat_to_json(self)

    @classmethod
    def from_json(cls, data: object) -> CrosscheckMeasurement:
        """The inverse of :meth:`to_json`."""
        return _flat_from_json(cls, data, "cross-check measurement")


@dataclass(frozen=True)
class CaseMeasurement:
    """Everything a case's processes measured; nothing here is predicted.

    Attributes:
        host: the host's load over the case.
        link: the ping-pong fit between ranks 0 and 1.
        isolated_calibration: per chunk count, each stage profiled alone (its bytes, and
            times used where the probes did not run the action kind).
        probes: per chunk count, the probe runs ("1f1b M=6") whose timelines calibrate times.
        in_situ_samples: per chunk count, per measured round, per "stage/kind" ("0/F"),
            every duration of that action in the round's probe steps.
        latency_samples: per chunk count, per measured round, the latency (less size over
            bandwidth) of every probe transfer of the round whose receiver was already
            waiting.
        baseline_samples: per M, the unpipelined step's span on one device, every round.
        solo_samples: per kind ("forward_s", "backward_s", ...), the whole model's profile on
            one micro-batch, every round.
        rounds: measured rounds (more than the case's repeats when measuring until stable).
    """

    case: Case
    machine: Machine
    host: HostLoad
    link: LinkProfile
    isolated_calibration: dict[int, tuple[StageProfile, ...]]
    probes: dict[int, tuple[str, ...]]
    in_situ_samples: dict[int, tuple[dict[str, tuple[float, ...]], ...]]
    latency_samples: dict[int, tuple[tuple[float, ...], ...]]
    runs: tuple[RunMeasurement, ...]
    baseline_samples: dict[int, tuple[float, ...]]
    solo_samples: dict[str, tuple[float, ...]]
    crosscheck: tuple[CrosscheckMeasurement, ...]
    rounds: int

    def to_json(self) -> dict[str, Any]:
        """The measurement as JSON (dictionary keys as strings)."""
        return {
            "case": self.case.to_json(),
            "machine": self.machine.to_json(),
            "host": self.host.to_json(),
            "link": self.link.to_json(),
            "isolated_calibration": {
                str(c): [p.to_json() for p in profiles]
                for c, profiles in self.isolated_calibration.items()
            },
            "probes": {str(c): list(names) for c, names in self.probes.items()},
            "in_situ_samples": {
                str(c): [{key: list(values) for key, values in r.items()} for r in rounds]
                for c, rounds in self.in_situ_samples.items()
            },
            "latency_samples": {
                str(c): [list(r) for r in rounds] for c, rounds in self.latency_samples.items()
            },
            "runs": [run.to_json() for run in self.runs],
            "baseline_samples": {str(m): list(v) for m, v in self.baseline_samples.items()},
            "solo_samples": {key: list(v) for key, v in self.solo_samples.items()},
            "crosscheck": [c.to_json() for c in self.crosscheck],
            "rounds": self.rounds,
        }

    @classmethod
    def from_json(cls, data: object) -> CaseMeasurement:
        """The inverse of :meth:`to_json`, strictly (:data:`MEASUREMENT_RULES`): a missing field
        or a value of the wrong kind (text for a time, NaN, a negative duration) is a one-line
        error naming its path."""
        _check_per_round(data)
        measured = decode(data, cls, "measurements", MEASUREMENT_RULES)
        _check_runs(measured)
        # The cross-check is not recorded with the case (its results are, in ``crosscheck``).
        return dataclasses.replace(
            measured, case=dataclasses.replace(measured.case, crosscheck=False)
        )


# What the types of a measurement do not say: latencies net of size over bandwidth may be
# negative (a transfer faster than the fitted bandwidth); the times and counts below are
# divided by, so they must be positive; a run measured no step or a case no run is no
# measurement.
MEASUREMENT_RULES = FieldRules(
    signed=frozenset({"latency_samples"}),
    positive=frozenset(
        {
            "bandwidth_bytes_per_s",
            "step_times_s",
            "wall_times_s",
            "baseline_samples",
            "ours_wall_times_s",
            "torch_wall_times_s",
            "devices",
            "microbatches",
            "chunks",
            "rounds",
            "repeats",
            "width",
            "layers",
            "microbatch_size",
            "sequence",
            "heads",
            "threads_per_process",
            "cores",
        }
    ),
    non_empty=frozenset(
        {"runs", "step_times_s", "wall_times_s", "microbatches", "schedules", "baseline_samples"}
    ),
)


def _check_runs(measured: CaseMeasurement) -> None:
    """Each run is one of the case's: its schedule, M and K, a peak per device, and a timeline
    on the case's devices whose actions end no sooner than they start."""
    case = measured.case
    for index, run in enumerate(measured.runs):
        where = f"measurements.runs[{index}]"
        if run.schedule not in case.schedules:
            raise PipesimError(
                f"{where}.schedule {run.schedule!r} is not one of the case's "
                f"({', '.join(case.schedules)})"
            )
        if run.microbatches not in case.microbatches or run.devices != case.devices:
            raise PipesimError(
                f"{where}: K={run.devices} M={run.microbatches} is not in the case's grid "
                f"(K={case.devices}, M in {', '.join(map(str, case.microbatches))})"
            )
        for field in ("peak_stash_bytes", "peak_allocated_bytes", "peak_rss_bytes"):
            if len(getattr(run, field)) != run.devices:
                raise PipesimError(
                    f"{where}.{field} has {len(getattr(run, field))} values for {run.devices} "
                    "devices"
                )
        stages = measured.isolated_calibration.get(run.chunks)
        if stages is None or len(stages) != run.devices * run.chunks:
            found = "none" if stages is None else f"{len(stages)} stage(s)"
            raise PipesimError(
                f"measurements.isolated_calibration[{run.chunks}] has {found}; "
                f"{run.schedule} M={run.microbatches} with v={run.chunks} needs "
                f"{run.devices * run.chunks} stage profiles"
            )
        _check_order(run, where)
        for position, (device, _, _, start_s, end_s) in enumerate(run.timeline):
            if device >= run.devices or end_s < start_s:
                raise PipesimError(
                    f"{where}.timeline[{position}]: device {device} from {start_s:g} s to "
                    f"{end_s:g} s is not an action of {run.devices} devices ending after it "
                    "starts"
                )


def _check_order(run: RunMeasurement, where: str) -> None:
    """A synthesised run has its order, a valid schedule of its shape; a registered one none."""
    from validation.synthesized_runs import run_schedule, synth_limit

    synthesised = synth_limit(run.schedule) is not None
    if synthesised != bool(run.order):
        held = "holds none" if synthesised else "holds one"
        raise PipesimError(
            f"{where}.order: {run.schedule!r} {held} (only a synthesised run records its order)"
        )
    if synthesised:
        if run.chunks != 1:
            raise PipesimError(
                f"{where}.chunks: a synthesised run has one stage per device, got {run.chunks}"
            )
        try:
            run_schedule(run.schedule, run.devices, run.microbatches, run.chunks, run.order)
        except (PipesimError, TypeError) as error:
            first = str(error).splitlines()[0]  # a deadlock's diagram stays out of one line
            raise PipesimError(f"{where}.order is not a valid schedule: {first}") from None


def _check_per_round(data: object) -> None:
    """Files from before per-round calibration pooled samples over rounds, which cannot be
    paired with the rounds' steps: refused, saying so."""
    if not isinstance(data, Mapping):
        return
    for field in ("in_situ_samples", "latency_samples"):
        by_chunks = data.get(field)
        for rounds in by_chunks.values() if isinstance(by_chunks, Mapping) else ():
            if not isinstance(rounds, list) or not all(
                isinstance(r, Mapping if field == "in_situ_samples" else list) for r in rounds
            ):
                raise PipesimError(
                    f"measurements: {field} is not a list per round (written by an older "
                    "pipesim? measure again)"
                )


@dataclass(frozen=True)
class Comparison:
    """One measured run against its prediction (a record of ``results.json``).

    Times are the :mod:`validation.estimate` statistic of the repeats; ``measured_time_spread``
    is their noise ((median - min) / min); ``measured_time_uncertainty`` and
    ``predicted_time_uncertainty`` are the relative half-widths of the 90% order-statistic
    intervals of the two estimates (the predicted one over the rounds' predictions).
    Memory: ``measured_peak_memory_bytes`` is measured (CUDA ``max_memory_allocated``; on CPU
    the resident-memory rise of each rank) and
    ``stash_peak_memory_bytes`` is the executor's own count of stashed activations, reported
    beside it; ``memory_error`` is the prediction's largest error against the measured one.
    Partitioned runs (lanes of one machine, one memory) have no per-device measurement: their
    ``measured_device_peak_bytes`` is the whole machine's (see
    :attr:`RunMeasurement.device_peak_bytes`), ``predicted_device_peak_bytes`` the simulator's
    most held at once by every lane together, and ``memory_error`` compares the two.
    """

    case: str
    schedule: str
    devices: int
    microbatches: int
    chunks: int
    predicted_time: float
    measured_time: float
    measured_time_min: float
    measured_time_max: float
    measured_time_spread: float
    measured_time_uncertainty: float
    predicted_time_uncertainty: float
    measured_wall_time: float
    time_error: float
    predicted_speedup: float
    measured_speedup: float
    speedup_error: float
    predicted_peak_memory_bytes: tuple[float, ...]
    measured_peak_memory_bytes: tuple[int | None, ...]
    stash_peak_memory_bytes: tuple[int, ...]
    memory_error: float | None
    stash_memory_error: float
    predicted_bubble_fraction: float
    analytic_bubble_fraction: float | None
    predicted_device_peak_bytes: float | None = None
    measured_device_peak_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        """Every field (tuples as lists)."""
        return _flat_to_json(self)

    @classmethod
    def from_json(cls, data: object) -> Comparison:
        """The inverse of :meth:`to_json`."""
        return _flat_from_json(cls, data, "record")


@dataclass(frozen=True)
class CrosscheckRecord:
    """One schedule on both runtimes beside pipesim's prediction. Times are wall-clock steps
    on rank 0; ``torch_wall_time`` and the errors against it are None where PyTorch's run gave
    no time, ``predicted_time`` None where the case did not predict that run."""

    schedule: str
    torch_class: str
    devices: int
    microbatches: int
    chunks: int
    ours_wall_time: float
    torch_wall_time: float | None
    predicted_time: float | None
    error_vs_ours: float | None
    error_vs_torch: float | None
    gradient_max_relative_error: float

    def to_json(self) -> dict[str, Any]:
        """Every field."""
        return _flat_to_json(self)

    @classmethod
    def from_json(cls, data: object) -> CrosscheckRecord:
        """The inverse of :meth:`to_json`."""
        return _flat_from_json(cls, data, "cross-check record")


@dataclass(frozen=True)
class Summary:
    """Aggregate |errors| over every compared run, and the noise of the measurements.

    The ``*_low`` / ``*_high`` fields bound each aggregate with a ``confidence`` interval from
    resampling the measured rounds (:mod:`validation.uncertainty`); zero confidence means no
    interval was computed (the bounds then equal the figure)."""

    runs: float
    median_time_error: float
    max_time_error: float
    mean_time_error: float
    median_speedup_error: float
    max_speedup_error: float
    mean_speedup_error: float
    median_memory_error: float
    max_memory_error: float
    mean_memory_error: float
    median_time_spread: float
    max_time_spread: float
    confidence: float = 0.0
    median_time_error_low: float = 0.0
    median_time_error_high: float = 0.0
    max_time_error_low: float = 0.0
    max_time_error_high: float = 0.0
    median_speedup_error_low: float = 0.0
    median_speedup_error_high: float = 0.0
    max_speedup_error_low: float = 0.0
    max_speedup_error_high: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """Every field."""
        return _flat_to_json(self)

    @classmethod
    def from_json(cls, data: object) -> Summary:
        """The inverse of :meth:`to_json`."""
        return _flat_from_json(cls, data, "summary")
