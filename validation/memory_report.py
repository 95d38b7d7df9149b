"""``pipesim validate --suite memory``: pipesim's per-stage peak memory against PyTorch's
accounting of the same GPT stages (:mod:`validation.memory_trace`), term by term, for a small
GPT (the shapes the tests hold under 5%) and two large ones, every attention implementation,
recomputation mode and pipeline position."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from application.outputs import write_text_atomically
from pipesim.common.progress import progress
from pipesim.common.units import format_bytes
from pipesim.files.strict_json import json_text
from pipesim.workload.architecture import Attention, TransformerArchitecture
from validation.memory_trace import MemoryTerms, TraceCase, compare, stage_name

TERMS = ("weights", "gradients", "optimizer", "activations", "peak")

# (label, layers of the traced model, hidden, heads, sequence, vocabulary, K, b, M)
SHAPES = (
    ("gpt-small", 6, 256, 4, 128, 1000, 3, 2, 4),
    ("gpt-1.7b", 24, 2304, 24, 2048, 51200, 4, 4, 4),
    ("gpt-13b", 40, 5120, 40, 2048, 51200, 4, 1, 4),
)
RECOMPUTE = ("none", "selective", "full")


def cases(shapes: tuple[tuple[Any, ...], ...] = SHAPES) -> Iterator[TraceCase]:
    """Every shape x attention x recomputation x (first, a middle, last) stage."""
    for label, layers, hidden, heads, seq, vocab, devices, b, m in shapes:
        for attention in Attention:
            arch = TransformerArchitecture(
                layers, hidden, heads, 4 * hidden, seq, vocab, attention=attention
            )
            for recompute in RECOMPUTE:
                for device in sorted({0, 1, devices - 1}):
                    yield TraceCase(
                        f"{label} {attention.value} {recompute} {stage_name(device, devices)}",
                        arch,
                        recompute,
                        devices,
                        device,
                        layers // devices,
                        b,
                        m,
                    )


@dataclass(frozen=True)
class Compared:
    """One traced stage: PyTorch's terms and pipesim's."""

    case: TraceCase
    traced: MemoryTerms
    predicted: MemoryTerms

    @property
    def error(self) -> float:
        """pipesim's peak over the traced one, minus 1."""
        return self.predicted.peak / self.traced.peak - 1

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case.name,
            "devices": self.case.devices,
            "device": self.case.device,
            "blocks": self.case.blocks,
            "microbatch_size": self.case.microbatch_size,
            "microbatches": self.case.microbatches,
            "traced_bytes": {t: getattr(self.traced, t) for t in TERMS},
            "pipesim_bytes": {t: getattr(self.predicted, t) for t in TERMS},
            "peak_error": self.error,
        }


def run(show_progress: bool = True) -> list[Compared]:
    """Trace and predict every case."""
    chosen = list(cases())
    out = []
    with progress(len(chosen), "validate memory: stages", enabled=show_progress) as bar:
        for case in chosen:
            traced, predicted = compare(case)
            out.append(Compared(case, traced, predicted))
            bar.update()
    return out


def summary(rows: list[Compared]) -> dict[str, float]:
    """Median and largest |peak error|."""
    errors = [abs(r.error) for r in rows]
    return {"median_abs_error": statistics.median(errors), "max_abs_error": max(errors)}


def table(rows: list[Compared]) -> str:
    """A markdown table: each term traced / pipesim, and the peak's error."""
    head = "| stage | " + " | ".join(f"{t} (traced / pipesim)" for t in TERMS) + " | error |"
    lines = [head, "|" + " --- |" * (len(TERMS) + 2)]
    for r in rows:
        cells = [
            f"{format_bytes(getattr(r.traced, t))} / {format_bytes(getattr(r.predicted, t))}"
            for t in TERMS
        ]
        lines.append(f"| {r.case.name} | " + " | ".join(cells) + f" | {r.error:+.1%} |")
    return "\n".join(lines)


def write(rows: list[Compared], out: Path) -> None:
    """report.md and results.json into ``out``."""
    stats = summary(rows)
    report = "\n".join(
        [
            "# pipesim's stage memory against PyTorch's accounting",
            "",
            "Each GPT stage runs its part of a 1F1B step and the optimizer step under "
            "FakeTensorMode with PyTorch's MemTracker (see validation/memory_trace.py); pipesim "
            "simulates the same stages. Weights, gradients and optimizer state are the static "
            "terms (the optimizer's state once its step is done); activations are everything "
            "else at the peak: the stash and what the running action holds (its temporaries, "
            "the tensors it receives and sends, recomputed activations, or the optimizer "
            "step's temporaries).",
            "",
            f"Median |peak error| {stats['median_abs_error']:.1%}, largest "
            f"{stats['max_abs_error']:.1%}, over {len(rows)} stages.",
            "",
            table(rows),
            "",
        ]
    )
    write_text_atomically(out / "report.md", report, field="--out")
    payload = {"summary": stats, "stages": [r.to_json() for r in rows]}
    write_text_atomically(out / "results.json", json_text(payload), field="--out")
