"""Validation suites: which models, shapes and schedules to calibrate, predict and measure.

``quick`` runs on a 2-core machine in a few minutes: K=2 over gloo, one thread per process, a
schedule of each family at M = 2 and 8, on an MLP whose stage costs dwarf the transfer overhead
and a small transformer (attention and MLP
blocks, float32: non-uniform work inside a stage, bigger activations). ``full`` covers every
schedule over K in {2, 4, 8} and M in {1, 2, 4, 8, 16, 32} for both models, keeping the shapes
the machine has the cores (CPU) or GPUs (CUDA) for, and says what it skipped and why. A suite of
which nothing can run here is refused, never reported as a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any

from executor.backends import DeviceKind, parse_member
from pipesim.common.limits import cpu_count
from pipesim.errors import PipesimError
from pipesim.schedules import schedule_info, schedule_names, unsupported_reason
from pipesim.sweep.grid import synth_limit
from validation import synthesized_runs
from validation.fields import require


class RunBackend(StrEnum):
    """How a validation case runs its K pipeline devices.

    ``cpu`` and ``cuda``: one process per device (gloo on CPU cores, NCCL on GPUs).
    ``cpu-partitioned`` and ``cuda-partitioned``: one process, every device a lane of one
    machine (:mod:`executor.lanes`: threads with equal thread budgets, or green contexts with
    equal shares of one GPU's SMs), all running at once; one GPU is enough."""

    CPU = "cpu"
    CUDA = "cuda"
    CPU_PARTITIONED = "cpu-partitioned"
    CUDA_PARTITIONED = "cuda-partitioned"

    @property
    def device_kind(self) -> DeviceKind:
        """What the stages compute on."""
        return DeviceKind.CUDA if self.value.startswith("cuda") else DeviceKind.CPU

    @property
    def partitioned(self) -> bool:
        """True when the devices are lanes of one machine."""
        return self.value.endswith("-partitioned")


def parse_run_backend(value: RunBackend | str, field: str = "--backend") -> RunBackend:
    """``value`` as a :class:`RunBackend`; anything else is a one-line error."""
    return parse_member(RunBackend, value, field, PipesimError)


class ModelKind(Enum):
    """The models a case can train (see :mod:`executor.models`)."""

    MLP = "mlp"
    TRANSFORMER = "transformer"


@dataclass(frozen=True)
class ModelSpec:
    """A model the executor builds the same way in every process (seeded). ``width`` is the
    hidden size; ``sequence`` and ``heads`` matter to the transformer only."""

    kind: ModelKind
    width: int
    layers: int
    microbatch_size: int
    sequence: int = 16
    heads: int = 4

    def to_json(self) -> dict[str, Any]:
        """All fields, the kind by its value."""
        return {
            "kind": self.kind.value,
            "width": self.width,
            "layers": self.layers,
            "microbatch_size": self.microbatch_size,
            "sequence": self.sequence,
            "heads": self.heads,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelSpec:
        """The inverse of :meth:`to_json`; a missing field is a one-line error."""
        kind = require(data, "kind", "model")
        try:
            model_kind = ModelKind(kind)
        except ValueError:
            raise PipesimError(f"model: kind must be mlp or transformer, got {kind!r}") from None
        return cls(
            model_kind,
            int(require(data, "width", "model")),
            int(require(data, "layers", "model")),
            int(require(data, "microbatch_size", "model")),
            int(require(data, "sequence", "model")),
            int(require(data, "heads", "model")),
        )


@dataclass(frozen=True)
class Case:
    """One model at one K: a grid of schedules x micro-batch counts."""

    name: str
    model: ModelSpec
    devices: int
    microbatches: tuple[int, ...]
    schedules: tuple[str, ...]
    backend: RunBackend
    warmup: int = 2
    repeats: int = 5
    crosscheck: bool = True

    def __post_init__(self) -> None:
        # A device kind (``DeviceKind.CPU``) or a name is taken as the backend it names.
        object.__setattr__(self, "backend", parse_run_backend(self.backend, "case: backend"))

    def runs(self) -> list[tuple[str, int, int]]:
        """(schedule, M, chunks) of every run the case makes."""
        return [
            (name, m, _chunks(name))
            for name in self.schedules
            for m in self.microbatches
            if _unsupported(name, self.devices, m) is None
        ]

    def to_json(self) -> dict[str, Any]:
        """A summary of the case."""
        return {
            "name": self.name,
            "model": self.model.to_json(),
            "devices": self.devices,
            "microbatches": list(self.microbatches),
            "schedules": list(self.schedules),
            "backend": self.backend,
            "warmup": self.warmup,
            "repeats": self.repeats,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Case:
        """The inverse of :meth:`to_json` (``crosscheck`` is not recorded: False)."""
        return cls(
            str(require(data, "name", "case")),
            ModelSpec.from_json(require(data, "model", "case")),
            int(require(data, "devices", "case")),
            tuple(int(m) for m in require(data, "microbatches", "case")),
            tuple(str(n) for n in require(data, "schedules", "case")),
            parse_run_backend(str(require(data, "backend", "case")), "case: backend"),
            int(require(data, "warmup", "case")),
            int(require(data, "repeats", "case")),
            crosscheck=False,
        )


def skipped_runs(case: Case) -> list[dict[str, Any]]:
    """The (schedule, M) of the grid a schedule cannot take, with the reason."""
    skipped = []
    for name in case.schedules:
        for m in case.microbatches:
            reason = _unsupported(name, case.devices, m)
            if reason is not None:
                skipped.append(
                    {"case": case.name, "schedule": name, "microbatches": m, "reason": reason}
                )
    return skipped


def _chunks(name: str) -> int:
    """The chunks per device a case runs ``name`` with (1 for a synthesised schedule)."""
    return 1 if synth_limit(name) is not None else schedule_info(name).default_chunks


def _unsupported(name: str, devices: int, microbatches: int) -> str | None:
    """Why a case cannot run ``name`` at this K and M (None when it can)."""
    if synth_limit(name) is not None:
        return synthesized_runs.unsupported(name, devices, microbatches)
    return unsupported_reason(name, devices, microbatches, _chunks(name))


QUICK_MLP = ModelSpec(ModelKind.MLP, width=1024, layers=8, microbatch_size=64)
QUICK_TRANSFORMER = ModelSpec(
    ModelKind.TRANSFORMER, width=256, layers=4, microbatch_size=2, sequence=64, heads=4
)


# Synthesised for each case's own calibrated costs (validation.synthesized_runs).
SYNTHESISED = ("synth N=1", "synth N=3")


# The partitioned suites' lanes: every case cuts the machine into this many equal lanes, so that
# K = 1, 2 and 4 are pipelines of devices of one kind and a pipeline's speedup is over one lane.
PARTITION_LANES = 4
PARTITIONED_SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1")
# Sized to keep a lane busy: on CPU one lane's thread computes a block in milliseconds, and on
# CUDA a quarter of an H100's SMs (32 of 132) takes about 2.5 ms per block forward in float32
# (1,024 tokens of width 1,024, no TF32: about 5e10 FLOP at some 16 TFLOP/s), long beside the
# host's time to issue a block's kernels for all four lanes (tens of microseconds each).
PARTITIONED_MODELS = {
    DeviceKind.CPU: ModelSpec(
        ModelKind.TRANSFORMER, width=256, layers=8, microbatch_size=4, sequence=64, heads=4
    ),
    DeviceKind.CUDA: ModelSpec(
        ModelKind.TRANSFORMER, width=1024, layers=8, microbatch_size=4, sequence=256, heads=16
    ),
}


# The quick suite's schedules and micro-batch counts: one of each family (flush, one forward
# one backward, interleaved, zero-bubble, V, synthesised) at a short and a long pipeline fill,
# so it answers in minutes on a 2-core machine (every schedule at M = 1, 2, 4, 8 took 15 minutes
# quiet, 98 runs); the full suite runs the rest.
QUICK_SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv", "synth N=3")
QUICK_MICROBATCHES = (2, 8)


def quick_suite(
    backend: RunBackend | str = RunBackend.CPU, fit_machine: bool = True
) -> tuple[list[Case], list[dict[str, Any]]]:
    """K=2 over one core per process: a schedule of each family (:data:`QUICK_SCHEDULES`, the
    synthesised one made for the case's calibrated costs with at most 3 micro-batches in
    flight) at M in 2 and 8, on the MLP and on the transformer. Partitioned: K in 1, 2, 4
    lanes, GPipe, 1F1B, interleaved 1F1B and ZB-H1 at M in 4, 8 on a transformer."""
    backend = parse_run_backend(backend)
    if backend.partitioned:
        return partitioned_suite(backend, (4, 8), PARTITIONED_SCHEDULES, (4, 2, 1), fit_machine)
    cases = [
        Case(
            "mlp-1024x8-K2",
            QUICK_MLP,
            2,
            QUICK_MICROBATCHES,
            QUICK_SCHEDULES,
            backend,
            repeats=15,
        ),
        Case(
            "transformer-256x4-K2",
            QUICK_TRANSFORMER,
            2,
            QUICK_MICROBATCHES,
            QUICK_SCHEDULES,
            backend,
            repeats=15,
        ),
    ]
    return _runnable(cases, backend, fit_machine)


def full_suite(
    backend: RunBackend | str = RunBackend.CPU, fit_machine: bool = True
) -> tuple[list[Case], list[dict[str, Any]]]:
    """Every schedule over K in 2, 4, 8 and M in 1..32 on the MLP and the transformer, as far as
    the machine allows. Partitioned: every schedule over K in 1, 2, 4 lanes and M in 4..16."""
    backend = parse_run_backend(backend)
    if backend.partitioned:
        return partitioned_suite(backend, (4, 8, 16), schedule_names(), (4, 2, 1), fit_machine)
    models = {
        "mlp-1024x16": ModelSpec(ModelKind.MLP, width=1024, layers=16, microbatch_size=32),
        "transformer-256x16": ModelSpec(
            ModelKind.TRANSFORMER, width=256, layers=16, microbatch_size=4, sequence=64, heads=4
        ),
    }
    cases = [
        Case(
            f"{label}-K{devices}",
            model,
            devices,
            (1, 2, 4, 8, 16, 32),
            (*schedule_names(), *SYNTHESISED),
            backend,
            warmup=1,
            repeats=5,
        )
        for devices in (2, 4, 8)
        for label, model in models.items()
    ]
    return _runnable(cases, backend, fit_machine)


def partitioned_suite(
    backend: RunBackend,
    microbatches: tuple[int, ...],
    schedules: tuple[str, ...],
    devices: tuple[int, ...],
    fit_machine: bool = True,
) -> tuple[list[Case], list[dict[str, Any]]]:
    """One case per K: the transformer of the backend's device kind on K of
    :data:`PARTITION_LANES` equal lanes (no cross-check: torch.distributed.pipelining needs a
    process per device). The deepest pipelines first: a run cut short by its time limit keeps
    them (each case compares with its own one-lane baseline)."""
    model = PARTITIONED_MODELS[backend.device_kind]
    cases = [
        Case(
            f"transformer-{model.width}x{model.layers}-K{k}-lanes",
            model,
            k,
            microbatches,
            schedules,
            backend,
            warmup=2,
            repeats=5,
            crosscheck=False,
        )
        for k in devices
    ]
    return _runnable(cases, backend, fit_machine)


def _runnable(
    cases: list[Case], backend: RunBackend, fit_machine: bool = True
) -> tuple[list[Case], list[dict[str, Any]]]:
    """The cases this machine can run and what it skips; none runnable is refused. Without
    ``fit_machine`` every case is kept (``--reuse`` predicts measurements made elsewhere, on
    a GPU, say)."""
    runnable, skipped = _fit_machine(cases, backend) if fit_machine else (cases, [])
    if not runnable:
        raise PipesimError(
            f"--backend {backend}: no case of the suite can run here ({skipped[0]['reason']})"
        )
    for case in runnable:
        skipped += skipped_runs(case)
    return runnable, skipped


def lane_threads() -> int:
    """Each CPU lane's threads in the partitioned suites: an equal share of the cores among
    :data:`PARTITION_LANES` lanes (at least one)."""
    return max(1, cpu_count() // PARTITION_LANES)


def available_workers(backend: RunBackend | DeviceKind) -> int:
    """Cores (CPU: one process per core), GPUs (CUDA) or lanes (partitioned) this machine
    offers."""
    run_backend = parse_run_backend(backend)
    if run_backend is RunBackend.CPU_PARTITIONED:
        return min(PARTITION_LANES, cpu_count() // lane_threads())
    if run_backend is RunBackend.CUDA_PARTITIONED:
        from executor.lanes import green_context_support

        return 0 if green_context_support() is not None else PARTITION_LANES
    if run_backend is RunBackend.CUDA:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    return cpu_count()


def _fit_machine(cases: list[Case], backend: RunBackend) -> tuple[list[Case], list[dict[str, Any]]]:
    have = available_workers(backend)
    kept, skipped = [], []
    for case in cases:
        if case.devices <= have:
            kept.append(case)
        else:
            skipped.append(
                {
                    "case": case.name,
                    "schedule": "*",
                    "microbatches": "*",
                    "reason": _shortfall(backend, case.devices, have),
                }
            )
    return kept, skipped


def _shortfall(backend: RunBackend, devices: int, have: int) -> str:
    """Why ``devices`` devices do not fit this machine, in words."""
    if backend is RunBackend.CUDA_PARTITIONED:
        from executor.lanes import green_context_support

        missing = green_context_support()
        if missing is not None:
            return f"CUDA lanes need green contexts: {missing}"
    if backend is RunBackend.CPU_PARTITIONED:
        threads = lane_threads()
        return (
            f"needs {devices} lanes of {threads} thread(s) = {devices * threads} cores, this "
            f"machine has {cpu_count()}"
        )
    unit = "GPU(s)" if backend is RunBackend.CUDA else "core(s)"
    return f"needs {devices} {unit}, this machine has {have}"
