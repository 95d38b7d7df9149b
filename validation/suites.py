"""Validation suites: which models, shapes and schedules to calibrate, predict and measure.

``quick`` runs on a 2-core machine in a few minutes: K=2 over gloo, one thread per process, an
MLP whose stage costs dwarf the transfer overhead and a small transformer (attention and MLP
blocks, float32: non-uniform work inside a stage, bigger activations). ``full`` covers every
schedule over K in {2, 4, 8} and M in {1, 2, 4, 8, 16, 32} for both models, keeping the shapes
the machine has the cores (CPU) or GPUs (CUDA) for, and says what it skipped and why. A suite of
which nothing can run here is refused, never reported as a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from executor.backends import DeviceKind, parse_device_kind
from pipesim.common.limits import cpu_count
from pipesim.errors import PipesimError
from pipesim.schedules import schedule_info, schedule_names, unsupported_reason
from pipesim.sweep.grid import synth_limit
from validation import synthesized_runs
from validation.fields import require


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
    backend: DeviceKind
    warmup: int = 2
    repeats: int = 5
    crosscheck: bool = True

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
            parse_device_kind(str(require(data, "backend", "case")), "case: backend"),
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


def quick_suite(
    backend: DeviceKind | str = DeviceKind.CPU,
) -> tuple[list[Case], list[dict[str, Any]]]:
    """K=2 over one core per process: every schedule, and the schedule synthesised for the
    case's calibrated costs with at most 1 and 3 micro-batches in flight, M in 1, 2, 4, 8, on
    the MLP and on the transformer."""
    backend = _check_backend(backend)
    schedules = (*schedule_names(), *SYNTHESISED)
    cases = [
        Case("mlp-1024x8-K2", QUICK_MLP, 2, (1, 2, 4, 8), schedules, backend, repeats=15),
        Case(
            "transformer-256x4-K2",
            QUICK_TRANSFORMER,
            2,
            (1, 2, 4, 8),
            schedules,
            backend,
            repeats=15,
        ),
    ]
    return _runnable(cases, backend)


def full_suite(
    backend: DeviceKind | str = DeviceKind.CPU,
) -> tuple[list[Case], list[dict[str, Any]]]:
    """Every schedule over K in 2, 4, 8 and M in 1..32 on the MLP and the transformer, as far as
    the machine allows."""
    backend = _check_backend(backend)
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
    return _runnable(cases, backend)


def _runnable(cases: list[Case], backend: DeviceKind) -> tuple[list[Case], list[dict[str, Any]]]:
    """The cases this machine can run and what it skips; none runnable is refused."""
    runnable, skipped = _fit_machine(cases, backend)
    if not runnable:
        raise PipesimError(
            f"--backend {backend}: no case of the suite can run here ({skipped[0]['reason']})"
        )
    for case in runnable:
        skipped += skipped_runs(case)
    return runnable, skipped


def available_workers(backend: DeviceKind) -> int:
    """Cores (CPU: one process per core) or GPUs (CUDA) this machine offers."""
    if backend is DeviceKind.CUDA:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    return cpu_count()


def _fit_machine(cases: list[Case], backend: DeviceKind) -> tuple[list[Case], list[dict[str, Any]]]:
    have = available_workers(backend)
    unit = "GPU(s)" if backend is DeviceKind.CUDA else "core(s)"
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
                    "reason": f"needs {case.devices} {unit}, this machine has {have}",
                }
            )
    return kept, skipped


def _check_backend(backend: DeviceKind | str) -> DeviceKind:
    return parse_device_kind(backend, "--backend")
