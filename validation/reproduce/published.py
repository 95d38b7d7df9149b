"""Published measured training runs of several frameworks and eras, predicted out of sample:
``pipesim reproduce published``.

The runs, as their sources state them and filled by one rule per field where they do not, are
:mod:`validation.reproduce.published_data`'s. Here each is simulated under its framework's
recipe (nothing is fitted to any row), compared on the step time, and reported: a row per run,
the headline over out-of-sample sources only (leave-one-source-out: no source of the headline
set anything in pipesim), the bias per framework, a line per source, each run's sensitivity to
every recipe choice and every field the rules filled, and a figure. The in-sample Megatron-LM
tables (2104.04473 Table 1, 2205.05198 Table 5) are the ``megatron`` suite's; their errors are
repeated here beside the others'. A run pipesim cannot state yet is listed with the reason and
no prediction.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from plots import save
from plots.published_figures import predicted_against_published_figure
from validation.reproduce.common import (
    recipe_sensitivity,
    suite_readme,
)
from validation.reproduce.common import sensitivity_markdown as common_sensitivity_markdown
from validation.reproduce.framework import Outcome, Row, Sample
from validation.reproduce.published_data import (
    FilledRun,
    PublishedRun,
    filled,
    published_runs,
    published_seconds,
    recompute_options,
)


@dataclass(frozen=True)
class Prediction:
    """One run's published and predicted step, with its sensitivities."""

    run: PublishedRun
    filled: FilledRun | None
    published_s: float
    predicted_s: float | None
    peak_memory_gib: float | None
    sensitivity: Mapping[str, float]  # field -> relative change of the predicted step

    @property
    def error(self) -> float | None:
        """predicted / published - 1 on the step time (positive: pipesim predicts slower)."""
        if self.predicted_s is None:
            return None
        return self.predicted_s / self.published_s - 1


def sensitivities(fill: FilledRun, base_s: float) -> dict[str, float]:
    """How much each recipe choice, and each field the rules filled, moves the predicted step:
    the relative change with that one thing changed (a recipe choice flipped; a filled field
    at its next value: micro-batch 2, the next recomputation, interleaving on or off)."""
    moved = recipe_sensitivity(
        fill.recipe, lambda recipe: fill.simulate(recipe=recipe).iteration_time_s, base_s
    )
    run = fill.run
    if "microbatch_size" in fill.filled and run.global_batch % (run.data * 2) == 0:
        moved["microbatch_size=2"] = fill.simulate(microbatch_size=2).iteration_time_s / base_s - 1
    if "recompute" in fill.filled:
        options = recompute_options(run.source.recipe)
        index = options.index(fill.recompute)
        if index + 1 < len(options):
            more = options[index + 1]
            moved[f"recompute={more}"] = fill.simulate(recompute=more).iteration_time_s / base_s - 1
    if "chunks" in fill.filled:
        layers = run.architecture.layers
        other_v = 1 if fill.chunks > 1 else 2
        if layers % (run.pipeline * other_v) == 0 and fill.microbatches % run.pipeline == 0:
            moved[f"chunks={other_v}"] = fill.simulate(chunks=other_v).iteration_time_s / base_s - 1
    return moved


def predict(run: PublishedRun) -> Prediction:
    published = published_seconds(run)
    if run.unstatable:
        return Prediction(run, None, published, None, None, {})
    fill = filled(run)
    result = fill.simulate()
    peak = max(d.peak_memory_bytes for d in result.per_device) / 2**30
    return Prediction(
        run,
        fill,
        published,
        result.iteration_time_s,
        peak,
        sensitivities(fill, result.iteration_time_s),
    )


def predictions() -> list[Prediction]:
    _, runs = published_runs()
    return [predict(run) for run in runs]


def _row(p: Prediction) -> Row:
    run = p.run
    if p.filled is None:
        note = f"not stated: {run.unstatable}"
        m = None
    else:
        unstated = ", ".join(p.filled.filled) or "nothing"
        note = f"{p.filled.label()}; filled by rule: {unstated}"
        m = p.filled.microbatches
    if run.source.verified != "primary":
        note += "; the published figure read in a third party's transcription only"
    return Row(
        f"{run.source.citation}",
        run.id,
        run.gpu,
        run.pipeline,
        m,
        "seconds per step",
        p.published_s,
        p.predicted_s,
        note,
        sample=run.source.sample,
        sample_why=run.source.used_for or "nothing in pipesim was chosen or set from it",
    )


def in_sample_rows() -> list[Row]:
    """The Megatron-LM tables pipesim was set up against (the ``megatron`` suite's), as they
    compare there: shown beside the others, never in the headline."""
    from validation.reproduce import megatron

    return megatron.table_1_rows() + [
        r for r in megatron.table_5_rows() if r.quantity.startswith("seconds")
    ]


def time_error(row: Row) -> float | None:
    """predicted / published - 1 on the step time, whether the row compares times or
    throughputs (a throughput's ratio is the inverse of the time's)."""
    if row.ratio is None:
        return None
    if row.quantity.startswith("seconds"):
        return row.ratio - 1
    if row.quantity.startswith("teraFLOP/s"):
        return 1 / row.ratio - 1
    raise ValueError(f"no time error for a row of {row.quantity!r}")


@dataclass(frozen=True)
class Headline:
    """The out-of-sample accuracy: over rows whose source set nothing in pipesim."""

    rows: int
    sources: int
    mean_abs_error: float
    max_abs_error: float
    bias_by_framework: Mapping[str, tuple[int, float]]  # framework -> (rows, mean signed error)
    unstated: int


def headline(found: Sequence[Prediction]) -> Headline:
    counted = [p for p in found if p.error is not None and p.run.source.counted]
    errors = [abs(p.error) for p in counted if p.error is not None]
    bias: dict[str, list[float]] = {}
    for p in counted:
        assert p.error is not None
        bias.setdefault(p.run.source.framework, []).append(p.error)
    return Headline(
        len(counted),
        len({p.run.source.key for p in counted}),
        statistics.fmean(errors) if errors else math.nan,
        max(errors) if errors else math.nan,
        {k: (len(v), statistics.fmean(v)) for k, v in bias.items()},
        sum(1 for p in found if p.predicted_s is None),
    )


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


def headline_lines(found: Sequence[Prediction]) -> list[str]:
    top = headline(found)
    lines = [
        f"out-of-sample (leave-one-source-out: no source below set anything): {_runs(top.rows)} "
        f"from {top.sources} sources, mean |error| on the step {top.mean_abs_error:.1%}, max "
        f"{top.max_abs_error:.1%} (issue 37's target: mean under 5%, no row over 10%)"
    ]
    for framework, (count, bias) in top.bias_by_framework.items():
        word = "slower" if bias > 0 else "faster"
        lines.append(
            f"  {framework}: {_runs(count)}, pipesim {abs(bias):.1%} {word} on average "
            "(target: within 5%)"
        )
    if top.unstated:
        lines.append(f"  {top.unstated} runs pipesim cannot state yet (listed, not predicted)")
    return lines


def source_lines(found: Sequence[Prediction], in_sample: Sequence[Row]) -> list[str]:
    """One line per source: rows, mean signed and mean |error|, in-sample or not."""
    by_source: dict[str, list[float]] = {}
    label: dict[str, str] = {}
    for p in found:
        if p.error is not None:
            by_source.setdefault(p.run.source.citation, []).append(p.error)
            label[p.run.source.citation] = p.run.source.sample.value
    for row in in_sample:
        error = time_error(row)
        if error is not None:
            by_source.setdefault(row.table, []).append(error)
            label[row.table] = Sample.IN.value
    lines = []
    for source, errors in by_source.items():
        lines.append(
            f"{source} [{label[source]}]: {_runs(len(errors))}, mean error "
            f"{statistics.fmean(errors):+.1%}, mean |error| "
            f"{statistics.fmean(abs(e) for e in errors):.1%}"
        )
    return lines


def sensitivity_markdown(found: Sequence[Prediction]) -> str:
    """Each run's predicted step moved by each recipe choice and each filled field (%)."""
    return common_sensitivity_markdown(
        [(p.run.id, p.sensitivity) for p in found if p.filled is not None]
    )


def labelled_in_sample_rows() -> list[Row]:
    """:func:`in_sample_rows`, each labelled in-sample with the reason."""
    return [
        dataclasses.replace(
            r,
            sample=Sample.IN,
            sample_why="pipesim's recipes and kernel classes were set up against this table "
            "(the megatron suite)",
        )
        for r in in_sample_rows()
    ]


def runs_markdown(found: Sequence[Prediction]) -> str:
    """One table of every run: source, sample, published and predicted step, error."""
    lines = [
        "| run | framework | sample | GPUs | published s | pipesim s | error | layout |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in found:
        sample = p.run.source.sample.value
        if p.run.source.verified != "primary":
            sample += " (transcription)"
        predicted = "-" if p.predicted_s is None else f"{p.predicted_s:.4g}"
        error = "-" if p.error is None else f"{p.error:+.1%}"
        layout = p.run.unstatable if p.filled is None else p.filled.label()
        lines.append(
            f"| {p.run.id} | {p.run.source.framework} | {sample} | {p.run.gpus} | "
            f"{p.published_s:.4g} | {predicted} | {error} | {layout} |"
        )
    return "\n".join(lines)


def results_markdown(found: Sequence[Prediction], inside: Sequence[Row]) -> str:
    """What the suite computes, as the README's last sections and the documentation's
    generated page (docs/reproductions/published-results.md) show it."""
    lines = [
        "## Accuracy (computed by this run)",
        "",
        *[
            f"  - {line.strip()}" if line.startswith("  ") else f"- {line}"
            for line in headline_lines(found)
        ],
        "",
        "By source (each source's rows; in-sample ones never in the headline):",
        "",
        *[f"- {line}" for line in source_lines(found, inside)],
        "",
        "## Every run (computed by this run)",
        "",
        "Error: pipesim's predicted step over the published one, less 1 (negative: pipesim "
        "predicts a faster step than was measured).",
        "",
        runs_markdown(found),
        "",
        "## Sensitivity (computed by this run)",
        "",
        "How far the predicted step moves when one recipe choice is flipped, or one field the "
        "rules filled takes its next value (positive: slower).",
        "",
        sensitivity_markdown(found),
        "",
    ]
    return "\n".join(lines)


def run(out: Path) -> Outcome:
    found = predictions()
    inside = labelled_in_sample_rows()
    figure = predicted_against_published_figure(
        [
            (
                p.run.id,
                p.run.source.framework,
                p.published_s,
                p.predicted_s,
                p.run.source.sample is Sample.IN,
            )
            for p in found
            if p.predicted_s is not None
        ]
    )
    save(figure, out / "predicted-vs-published.png")
    return Outcome(
        "Published training runs of several frameworks, predicted by pipesim out of sample",
        [_row(p) for p in found] + inside,
        suite_readme("published.md") + "\n" + results_markdown(found, inside),
        {"Predicted against published step time": "predicted-vs-published.png"},
    )


DOCS_PAGE = "docs/reproductions/published-results.md"
PROG = "python -m validation.reproduce.published"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m validation.reproduce.published [FILE]``: write the generated results page
    the documentation includes (default: :data:`DOCS_PAGE` of the repository this module is
    in), atomically; a target that cannot be written is one line, exit 2."""
    import sys

    from application.command_line import EXIT_BAD_INPUT, ArgumentParser
    from application.outputs import output_path, write_text_atomically
    from pipesim.errors import PipesimError

    parser = ArgumentParser(
        prog=PROG,
        description="Write the published-runs results page (Markdown) that "
        "docs/reproductions/published.md includes.",
    )
    repository = Path(__file__).resolve().parents[2]
    parser.add_argument(
        "file",
        nargs="?",
        type=Path,
        default=repository / DOCS_PAGE,
        metavar="FILE",
        help=f"where to write it (default: {DOCS_PAGE} of this repository)",
    )
    args = parser.parse_args(argv)
    try:
        target = output_path(args.file, "FILE", (".md",))  # refused before computing
        text = (
            "<!-- generated by `python -m validation.reproduce.published`: do not edit -->\n\n"
            + results_markdown(predictions(), labelled_in_sample_rows())
        )
        write_text_atomically(target, text, field="FILE")
    except PipesimError as error:
        sys.stderr.write(f"{PROG}: error: {str(error).splitlines()[0]}\n")
        return EXIT_BAD_INPUT
    sys.stdout.write(f"wrote {target}\n")
    return 0


if __name__ == "__main__":
    from application.command_line import watching_stdout
    from application.lifetime import interrupts_in_one_line

    raise SystemExit(watching_stdout(lambda: interrupts_in_one_line(main, PROG), PROG))
