"""Published measured training runs of several frameworks and eras, predicted out of sample.

Every run of ``published_runs.toml`` is a measurement someone published (a paper's table, a
framework's performance page) with the configuration it states: model shape, GPUs, tensor,
pipeline and data parallelism, batch, and what it measured. What it does not state is filled by
:data:`FILL_RULES`, one rule per field for every row, written before any prediction was looked
at, and each row lists the fields it filled. The software is the recipe of the framework that
ran it (:mod:`pipesim.config.recipes`); nothing is fitted to any row.

A source that was used to choose or set anything in pipesim is in-sample
(``used_for`` in the file): its rows are shown, and left out of the headline, which is over the
out-of-sample sources only (leave-one-source-out: no source of the headline set anything). The
in-sample Megatron-LM tables (2104.04473 Table 1, 2205.05198 Table 5) are the ``megatron``
suite's; their errors are repeated here beside the others'.

A run pipesim cannot state yet (sharded data parallelism beyond ZeRO-1, context parallelism) is
listed with the reason and no prediction.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pipesim.config import RunConfig
from pipesim.config.recipe import CHOICES, Recipe
from pipesim.config.recipes import named_recipe
from pipesim.costs.model_on_hardware import model_on_hardware
from pipesim.engine import SimulationResult, simulate
from pipesim.files.toml_reader import parse_toml
from pipesim.hardware import hardware
from pipesim.hardware.catalogue import HardwareSpec
from pipesim.hardware.network import Link
from pipesim.parallel.config import Parallelism, Recompute
from pipesim.partition.from_model import blocks_partition
from pipesim.schedules import build
from pipesim.workload.architecture import (
    Attention,
    Mlp,
    Position,
    TransformerArchitecture,
)
from pipesim.workload.catalogue import from_architecture, llama_architecture
from pipesim.workload.model import Model
from plots import save
from plots.published_figures import predicted_against_published_figure
from validation.reproduce.common import flipped_recipe, suite_readme
from validation.reproduce.common import sensitivity_markdown as common_sensitivity_markdown
from validation.reproduce.framework import Outcome, Row, Sample

DATA_FILE = "published_runs.toml"

# The rule for each field a source may leave unstated, fixed before any prediction was made
# (issue 37: "one rule for all rows, fixed before looking at times"). A row names the fields
# it filled; the sensitivity table shows how far each filled field could move it.
FILL_RULES: Mapping[str, str] = {
    "microbatch_size": "1 (the smallest, and Megatron-LM's and DeepSpeed's default)",
    "recompute": "the least recomputation, among those the framework offers (none, then "
    "selective where it exists, then full), with which every stage fits the GPU's memory in "
    "pipesim's memory model",
    "chunks": "1 (no interleaving) unless the source says interleaved, then 2",
    "sequence_parallel": "on where the recipe is Megatron-Core's (its recipes turn it on with "
    "tensor parallelism), off otherwise",
    "zero": "1 where the framework shards the optimizer by default with data parallelism "
    "(DeepSpeed's ZeRO-1 in Megatron-DeepSpeed, Megatron-Core's distributed optimizer), else 0",
    "dtype": "bf16 from 2022 on, fp16 before",
    "network": "the catalogue entry's (one InfiniBand NIC per GPU) unless the source states "
    "its fabric",
}

# Frameworks whose recomputation has a selective mode (attention's core only, 2205.05198):
# Megatron-LM from 2022 and Megatron-Core.
SELECTIVE_RECIPES = ("megatron-lm-2022", "megatron-core-2024", "nemo-2024")
SEQUENCE_PARALLEL_RECIPES = ("megatron-core-2024", "nemo-2024")
ZERO_1_RECIPES = ("deepspeed-pipe", "megatron-core-2024", "nemo-2024")
# What pipesim cannot state until issue 38 (sharded data parallelism, context parallelism).
UNSTATABLE_SHARDING = ("zero-2", "zero-3", "fsdp")


@dataclass(frozen=True)
class Source:
    """Where runs were published, by whom they were run, and whether pipesim learnt from it."""

    key: str
    citation: str
    framework: str
    recipe: str
    used_for: str = ""  # non-empty: what it set in pipesim (in-sample)
    verified: str = "primary"  # or "secondary": only a third party's transcription was read
    # The recipe's choices this source's runs changed, as the source says (a README's flags).
    recipe_changes: Mapping[str, object] = dataclasses.field(default_factory=dict)
    recipe_changes_why: str = ""

    @property
    def sample(self) -> Sample:
        return Sample.IN if self.used_for else Sample.OUT

    @property
    def counted(self) -> bool:
        """In the headline: out-of-sample and read in the source itself."""
        return self.sample is Sample.OUT and self.verified == "primary"

    def recipe_object(self) -> Recipe:
        """The named recipe with this source's stated changes."""
        recipe = named_recipe(self.recipe)
        if not self.recipe_changes:
            return recipe
        return recipe.with_choices(self.recipe_changes, why=self.recipe_changes_why)


@dataclass(frozen=True)
class Metric:
    """What a run published, and how it converts to seconds per step.

    Kinds: ``seconds-per-step``; ``tflops-per-gpu`` (with ``formula``: ``megatron`` counts
    2104.04473's 24·B·s·l·h²·(1 + s/6h + V/16lh) per forward-and-backward, times 4/3 with full
    recomputation, as Megatron-LM's and Megatron-DeepSpeed's loggers do); ``tokens-per-s-per-gpu``.
    """

    kind: str
    value: float
    formula: str = ""


@dataclass(frozen=True)
class PublishedRun:
    """One published run, as its source states it; None where it does not."""

    id: str
    source: Source
    where: str
    year: int
    gpu: str
    gpus: int
    tensor: int
    pipeline: int
    architecture: TransformerArchitecture
    global_batch: int
    metric: Metric
    context: int = 1
    chunks: int | None = None
    interleaved: bool = False
    microbatch_size: int | None = None
    recompute: str | None = None
    sequence_parallel: bool | None = None
    sharding: str | None = None
    dtype: str | None = None
    inter_node_bytes_per_s_per_gpu: float | None = None
    memory_gib: float | None = None
    quote: str = ""

    @property
    def data(self) -> int:
        return self.gpus // (self.tensor * self.pipeline * self.context)

    @property
    def unstatable(self) -> str:
        """Why pipesim cannot state this run yet; empty when it can."""
        if self.context > 1:
            return f"context parallelism (CP={self.context}) needs issue 38"
        if self.sharding in UNSTATABLE_SHARDING:
            return f"{self.sharding} sharding needs issue 38 (pipesim has ZeRO-0 and ZeRO-1)"
        return ""


@dataclass(frozen=True)
class FilledRun:
    """A run with every field concrete: the published ones and the rule's for the rest."""

    run: PublishedRun
    recipe: Recipe
    model: Model
    spec: HardwareSpec
    chunks: int
    microbatch_size: int
    recompute: str
    sequence_parallel: bool
    zero: int
    dtype: str
    filled: tuple[str, ...]

    @property
    def microbatches(self) -> int:
        return self.run.global_batch // (self.run.data * self.microbatch_size)

    def label(self) -> str:
        v = f" v={self.chunks}" if self.chunks > 1 else ""
        sp = " SP" if self.sequence_parallel else ""
        zero = f" ZeRO-{self.zero}" if self.zero else ""
        return (
            f"T={self.run.tensor}{sp} P={self.run.pipeline}{v} D={self.run.data} "
            f"b={self.microbatch_size} M={self.microbatches}, recompute {self.recompute}{zero}, "
            f"{self.dtype}, {self.run.gpus} GPUs, {self.recipe.name}"
        )

    def simulate(
        self,
        *,
        recipe: Recipe | None = None,
        recompute: str | None = None,
        microbatch_size: int | None = None,
        chunks: int | None = None,
    ) -> SimulationResult:
        """One step of the run (or of it with one field changed, for the sensitivity table)."""
        run = self.run
        b = self.microbatch_size if microbatch_size is None else microbatch_size
        v = self.chunks if chunks is None else chunks
        m = run.global_batch // (run.data * b)
        schedule = build("1f1b" if v == 1 else "interleaved-1f1b", run.pipeline, m, v)
        parallelism = Parallelism(
            tensor=run.tensor,
            sequence_parallel=self.sequence_parallel,
            recompute=Recompute.parse(self.recompute if recompute is None else recompute),
            zero=self.zero,
            data=run.data,
        )
        config = RunConfig(self.model, self.spec, parallelism, recipe or self.recipe)
        costs = model_on_hardware(
            config,
            run.pipeline,
            v,
            b,
            blocks_partition(self.model, run.pipeline * v),
            placement=schedule.placement,
        )
        return simulate(schedule, costs)


def _architecture(table: Mapping[str, Any]) -> TransformerArchitecture:
    """The model shape of a ``[run.model]`` table: GPT (learned positions, GELU, LayerNorm,
    tied embeddings, biases, dropout), BLOOM (GPT's with ALiBi: no position embedding) or
    Llama (RoPE, SwiGLU, RMSNorm, untied, no biases, no dropout, grouped-query attention)."""
    family = table["family"]
    shape: dict[str, Any] = {
        key: int(table[key]) for key in ("layers", "hidden", "heads", "ffn", "seq", "vocab")
    }
    if family == "gpt":
        return TransformerArchitecture(**shape)
    if family == "bloom":
        return TransformerArchitecture(**shape, position=Position.NONE)
    if family == "nemotron":
        # Nemotron-4 (arXiv 2402.16819 §2): squared-ReLU MLP of two matrices (timed as GELU's,
        # both elementwise between them), RoPE, no biases, no dropout, untied embeddings, GQA.
        return TransformerArchitecture(
            **shape,
            kv_heads=int(table.get("kv_heads", shape["heads"])),
            position=Position.ROPE,
            tied_embeddings=False,
            linear_bias=False,
            dropout=False,
            embedding_dropout=False,
        )
    if family == "llama":
        return llama_architecture(
            shape["layers"],
            shape["hidden"],
            shape["heads"],
            int(table.get("kv_heads", shape["heads"])),
            shape["ffn"],
            shape["seq"],
            shape["vocab"],
        )
    raise ValueError(f"{DATA_FILE}: unknown model family {family!r}")


@cache
def published_runs() -> tuple[tuple[Source, ...], tuple[PublishedRun, ...]]:
    """The sources and runs of :data:`DATA_FILE`, in its order."""
    text = resources.files("validation.reproduce").joinpath(DATA_FILE).read_bytes()
    data = parse_toml(text, DATA_FILE)
    sources = {}
    for entry in data["source"]:
        fields = dict(entry)
        if "recipe_changes" in fields:
            fields["recipe_changes"] = {
                key: Attention(value) if key == "attention" else value
                for key, value in fields["recipe_changes"].items()
            }
        sources[fields["key"]] = Source(**fields)
    runs = []
    for entry in data["run"]:
        fields = dict(entry)
        fields["source"] = sources[fields["source"]]
        fields["architecture"] = _architecture(fields.pop("model"))
        fields["metric"] = Metric(**fields["metric"])
        runs.append(PublishedRun(**fields))
    return tuple(sources.values()), tuple(runs)


def _recompute_options(framework_recipe: str) -> tuple[str, ...]:
    if framework_recipe in SELECTIVE_RECIPES:
        return ("none", "selective", "full")
    return ("none", "full")


def _spec(run: PublishedRun) -> HardwareSpec:
    """The GPU's catalogue entry, its inter-node link at the source's bandwidth where stated."""
    spec = hardware(run.gpu)
    if run.inter_node_bytes_per_s_per_gpu is None or spec.inter_node_link is None:
        return spec
    link = spec.inter_node_link
    stated = Link(
        f"{link.name}-as-stated",
        run.inter_node_bytes_per_s_per_gpu,
        link.latency_s,
        collective_bandwidth_bytes_per_s=run.inter_node_bytes_per_s_per_gpu
        * (link.collective_bandwidth_bytes_per_s or link.bandwidth_bytes_per_s)
        / link.bandwidth_bytes_per_s,
    )
    return dataclasses.replace(spec, name=f"{spec.name}-{run.source.key}", inter_node_link=stated)


def filled(run: PublishedRun) -> FilledRun:
    """``run`` with :data:`FILL_RULES` applied to what its source does not state."""
    recipe = run.source.recipe_object()
    missing = []
    dtype = run.dtype
    if dtype is None:
        dtype = "bf16" if run.year >= 2022 else "fp16"
        missing.append("dtype")
    model = from_architecture(
        run.id,
        run.architecture,
        dtype=dtype,
        default_batch=run.global_batch,
        description=f"{run.id} ({run.source.citation})",
        gradient_bytes=4.0 if dtype == "bf16" else 2.0,
    )
    b = run.microbatch_size
    if b is None:
        b = 1
        missing.append("microbatch_size")
    chunks = run.chunks
    if chunks is None:
        chunks = 2 if run.interleaved else 1
        missing.append("chunks")
    sp = run.sequence_parallel
    if sp is None:
        sp = run.tensor > 1 and run.source.recipe in SEQUENCE_PARALLEL_RECIPES
        missing.append("sequence_parallel")
    if run.sharding is None:
        zero = 1 if run.source.recipe in ZERO_1_RECIPES and run.data > 1 else 0
        missing.append("zero")
    else:
        zero = 1 if run.sharding == "zero-1" else 0
    if run.inter_node_bytes_per_s_per_gpu is None:
        missing.append("network")
    draft = FilledRun(
        run, recipe, model, _spec(run), chunks, b, run.recompute or "none", sp, zero, dtype, ()
    )
    if run.recompute is None:
        missing.append("recompute")
        for option in _recompute_options(run.source.recipe):
            draft = dataclasses.replace(draft, recompute=option)
            if not draft.simulate().oom:
                break
    return dataclasses.replace(draft, filled=tuple(missing))


def flops_per_step(run: PublishedRun, formula: str) -> float:
    """A step's FLOPs by the source's own count (see :class:`Metric`)."""
    arch = run.architecture
    s, layers, h, v = arch.seq, arch.layers, arch.hidden, arch.vocab
    if formula == "megatron-core":
        # megatron/training/training.py num_floating_point_operations (Megatron-Core r0.8.0):
        # 12·B·s·l·h²·((1 + g/a + s/h)·(q/h) + (f/h)·(3/2 if SwiGLU) + V/(2·l·h)), q = h here.
        groups = arch.kv_heads or arch.heads
        gated = 1.5 if arch.mlp is Mlp.SWIGLU else 1.0
        return (
            12 * run.global_batch * s * layers * h * h
            * ((1 + groups / arch.heads + s / h) + arch.ffn / h * gated + v / (2 * layers * h))
        )  # fmt: skip
    if formula not in ("megatron", "megatron-recompute"):
        raise ValueError(f"{run.id}: unknown FLOP formula {formula!r}")
    passes = 4 if formula == "megatron-recompute" else 3
    return (
        24 * passes * run.global_batch * s * layers * h * h
        * (1 + s / (6 * h) + v / (16 * layers * h))
    )  # fmt: skip


def published_seconds(run: PublishedRun) -> float:
    """The published metric as seconds per step."""
    metric = run.metric
    if metric.kind == "seconds-per-step":
        return metric.value
    if metric.kind == "tflops-per-gpu":
        return flops_per_step(run, metric.formula) / (metric.value * 1e12 * run.gpus)
    if metric.kind == "tokens-per-s-per-gpu":
        return run.global_batch * run.architecture.seq / (metric.value * run.gpus)
    raise ValueError(f"{run.id}: unknown metric kind {metric.kind!r}")


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
    moved: dict[str, float] = {}
    for choice in CHOICES:
        other = flipped_recipe(fill.recipe, choice)
        if other is not None and other != fill.recipe:
            moved[f"recipe.{choice}"] = fill.simulate(recipe=other).iteration_time_s / base_s - 1
    run = fill.run
    if "microbatch_size" in fill.filled and run.global_batch % (run.data * 2) == 0:
        moved["microbatch_size=2"] = fill.simulate(microbatch_size=2).iteration_time_s / base_s - 1
    if "recompute" in fill.filled:
        options = _recompute_options(run.source.recipe)
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
