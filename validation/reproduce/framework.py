"""What every reproduction suite writes: a markdown table of paper, simulated and ratio side by
side, the same as CSV (one row per table cell), its figures and a README."""

from __future__ import annotations

import csv
import dataclasses
import io
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from application.outputs import write_text_atomically

CSV_COLUMNS = (
    "table",
    "model",
    "hardware",
    "K",
    "M",
    "quantity",
    "paper",
    "simulated",
    "ratio",
    "difference",
    "sample",
    "note",
)


class Sample(Enum):
    """What a published number can prove about pipesim.

    A measured run that was used to choose or set anything in pipesim (a constant, a recipe's
    choice, a mechanism added because the run said the model was off, a test's bound) is
    in-sample from then on: agreeing with it shows the model can be made to agree, not that it
    predicts. Only out-of-sample measurements count towards a headline accuracy. A published
    value that is a formula's or an analytic claim's (a bubble fraction, a memory bound), not a
    measured run (or a bubble the paper's own scheduler computed from times it gives), checks
    the implementation, not the predictions.
    """

    IN = "in-sample"
    OUT = "out-of-sample"
    FORMULA = "formula"


@dataclass(frozen=True)
class SampleLabel:
    """A table's sample, with the reason (what it was used for, or why it was not)."""

    sample: Sample
    why: str


@dataclass(frozen=True)
class Row:
    """One cell of a paper's table: the published number and pipesim's."""

    table: str
    model: str
    hardware: str
    devices: int | None
    microbatches: int | None
    quantity: str
    paper: float | None
    simulated: float | None
    note: str = ""
    # The cell equals the paper's by construction (the baseline a table normalizes to): shown
    # in the table, left out of every summary, which it would pull towards 1.
    by_construction: bool = False
    # The cell follows from another cell of the same run (MFU and HFU from its step time):
    # shown, but not counted as an agreement of its own, which would count one agreement twice.
    derived: bool = False
    # In-sample, out-of-sample or a formula's value (see Sample); every cell with a published
    # value says which (Outcome refuses one that does not), and why.
    sample: Sample | None = None
    sample_why: str = ""

    @property
    def ratio(self) -> float | None:
        """simulated / paper, where both exist and the paper's is not zero."""
        if self.paper is None or self.simulated is None or self.paper == 0:
            return None
        return self.simulated / self.paper

    @property
    def difference(self) -> float | None:
        """simulated - paper, where both exist: the comparison where the paper's value is 0
        (a bubble the paper's formula says vanishes), which no ratio can make."""
        if self.paper is None or self.simulated is None:
            return None
        return self.simulated - self.paper

    def to_json(self) -> dict[str, object]:
        """The row as one object of ``pipesim reproduce --json``."""
        return {
            "table": self.table,
            "model": self.model,
            "hardware": self.hardware,
            "K": self.devices,
            "M": self.microbatches,
            "quantity": self.quantity,
            "paper": self.paper,
            "simulated": self.simulated,
            "ratio": self.ratio,
            "difference": self.difference,
            "note": self.note,
            "by_construction": self.by_construction,
            "derived": self.derived,
            "sample": None if self.sample is None else self.sample.value,
            "sample_why": self.sample_why,
        }


def labelled(rows: list[Row], labels: Mapping[str, SampleLabel]) -> list[Row]:
    """``rows``, each given its table's label; a table without one is a programming error
    (every reproduction says, table by table, what its published numbers can prove)."""
    missing = sorted({r.table for r in rows} - set(labels))
    if missing:
        raise ValueError(f"tables without a sample label: {missing}")
    return [
        dataclasses.replace(r, sample=labels[r.table].sample, sample_why=labels[r.table].why)
        for r in rows
    ]


@dataclass
class Outcome:
    """A suite's result: rows, figure files written into the output folder, README text."""

    title: str
    rows: list[Row]
    readme: str
    figures: dict[str, str] = field(default_factory=dict)  # caption -> file name

    def __post_init__(self) -> None:
        unlabelled = sorted(
            {r.table for r in self.rows if r.paper is not None and r.sample is None}
        )
        if unlabelled:
            raise ValueError(
                f"{self.title}: cells with a published value but no sample label in {unlabelled}"
            )


@dataclass(frozen=True)
class Experiment:
    """A registered reproduction: ``run(out_dir)`` computes and saves figures, returns rows."""

    name: str
    title: str
    paper: str
    run: Callable[[Path], Outcome]


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0 or 1e-3 <= abs(value) < 1e5:
        return f"{value:.4g}"
    return f"{value:.3e}"


def _comparison(row: Row) -> str:
    """The ratio; where the paper's value is 0, the difference (written ``Δ ...``)."""
    if row.ratio is None and row.difference is not None:
        return f"Δ {row.difference:+.3g}"
    return _number(row.ratio)


def summary_lines(rows: list[Row]) -> list[str]:
    """One line per paper table: how many cells compare with a published number, the range
    and median of pipesim / paper over them, and how many cells were left out because they
    equal the paper by construction (a normalization's baseline) or follow from another cell
    (MFU from a step time); where the paper's value is 0, the largest difference instead."""
    by_table: dict[str, list[Row]] = {}
    for row in rows:
        if row.difference is not None:
            by_table.setdefault(row.table, []).append(row)
    lines = []
    for table, cells in by_table.items():
        fixed = [r for r in cells if r.by_construction]
        derived = [r for r in cells if r.derived and not r.by_construction]
        free = [r for r in cells if not r.by_construction and not r.derived]
        ratios = sorted(r.ratio for r in free if r.ratio is not None)
        zeros = [abs(r.difference or 0.0) for r in free if r.ratio is None]
        parts = []
        if ratios:
            cells_word = "cell" if len(ratios) == 1 else "cells"
            parts.append(
                f"{len(ratios)} {cells_word}, pipesim/paper {ratios[0]:.2f} to {ratios[-1]:.2f}, "
                f"median {statistics.median(ratios):.2f}"
            )
        if zeros:
            parts.append(f"{len(zeros)} where the paper has 0: pipesim within {max(zeros):.3g}")
        if fixed:
            parts.append(
                f"{len(fixed)} baseline {'cell' if len(fixed) == 1 else 'cells'} "
                "equal to the paper by construction left out"
            )
        if derived:
            parts.append(
                f"{len(derived)} derived {'cell' if len(derived) == 1 else 'cells'} (following "
                "from another cell of the same run) shown, not counted"
            )
        samples = sorted({r.sample.value for r in cells if r.sample is not None})
        tag = f" [{', '.join(samples)}]" if samples else ""
        lines.append(f"{table}: {'; '.join(parts) or 'no cells to compare'}{tag}")
    headline = sample_headline(rows)
    if headline:
        lines.append(headline)
    return lines


def sample_headline(rows: list[Row]) -> str:
    """The accuracy a suite may claim: over its out-of-sample measured cells only (left out:
    baselines, derived cells, formulas and in-sample cells), the mean and largest
    |pipesim/paper - 1|; or that it has none to claim, and why."""
    compared = [
        r
        for r in rows
        if r.ratio is not None and r.sample is not None and not r.by_construction and not r.derived
    ]
    if not compared:
        return ""
    counted = [abs((r.ratio or 1.0) - 1) for r in compared if r.sample is Sample.OUT]
    inside = sum(1 for r in compared if r.sample is Sample.IN)
    if not counted:
        if not inside:
            return (
                "out-of-sample: none; every published value compared here is a formula's or an "
                "analytic claim's, not a measured run"
            )
        return (
            f"out-of-sample: none; all {inside} measured cells compared here are in-sample "
            "(used to choose or set something in pipesim), so they show agreement, not "
            "prediction"
        )
    return (
        f"out-of-sample: {len(counted)} {'cell' if len(counted) == 1 else 'cells'}, "
        f"|pipesim/paper - 1| mean {statistics.fmean(counted):.1%}, max {max(counted):.1%} "
        f"({inside} in-sample {'cell' if inside == 1 else 'cells'} left out)"
    )


def table_markdown(outcome: Outcome) -> str:
    """One markdown table per paper table, the ratio beside each pair."""
    lines = [f"# {outcome.title}", ""]
    by_table: dict[str, list[Row]] = {}
    for row in outcome.rows:
        by_table.setdefault(row.table, []).append(row)
    for name, rows in by_table.items():
        label = rows[0]
        lines += [f"## {name}", ""]
        if label.sample is not None:
            lines += [f"*{label.sample.value}*: {label.sample_why}", ""]
        lines += [
            "| model | hardware | K | M | quantity | paper | pipesim | ratio | note |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in rows:
            lines.append(
                f"| {r.model} | {r.hardware} | {r.devices if r.devices is not None else '-'} | "
                f"{r.microbatches if r.microbatches is not None else '-'} | {r.quantity} | "
                f"{_number(r.paper)} | {_number(r.simulated)} | {_comparison(r)} | {r.note} |"
            )
        lines.append("")
    if outcome.figures:
        lines += ["## Figures", ""]
        for caption, file in outcome.figures.items():
            lines += [f"### {caption}", "", f"![{caption}]({file})", ""]
    return "\n".join(lines)


def table_csv(rows: list[Row]) -> str:
    """``table, model, hardware, K, M, quantity, paper, simulated, ratio, difference, sample,
    note``, one row per cell."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in rows:
        writer.writerow(
            [
                r.table,
                r.model,
                r.hardware,
                "" if r.devices is None else r.devices,
                "" if r.microbatches is None else r.microbatches,
                r.quantity,
                "" if r.paper is None else repr(r.paper),
                "" if r.simulated is None else repr(r.simulated),
                "" if r.ratio is None else repr(r.ratio),
                "" if r.difference is None else repr(r.difference),
                "" if r.sample is None else r.sample.value,
                r.note,
            ]
        )
    return buffer.getvalue()


def write_outputs(outcome: Outcome, out: Path) -> dict[str, Path]:
    """``table.md``, ``results.csv`` and ``README.md`` into ``out`` (figures are already
    there); returns the paths."""
    paths = {
        "table": out / "table.md",
        "csv": out / "results.csv",
        "readme": out / "README.md",
    }
    write_text_atomically(paths["table"], table_markdown(outcome), field="--out")
    write_text_atomically(paths["csv"], table_csv(outcome.rows), field="--out")
    write_text_atomically(paths["readme"], outcome.readme, field="--out")
    return paths
