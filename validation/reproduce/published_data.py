"""Published measured training runs as their sources state them, and filled by one rule per
field where they do not (``published_runs.toml``; :mod:`validation.reproduce.published`
predicts them).

Every run is a measurement someone published (a paper's table, a framework's performance page)
with the configuration it states: model shape, GPUs, tensor, pipeline and data parallelism,
batch, and what it measured. What it does not state is filled by :data:`FILL_RULES`, one rule per
field for every row, written before any prediction was looked at; each filled run lists the
fields it filled. A source names the recipe of the framework that ran it
(:mod:`pipesim.config.recipes`) and, where it set anything in pipesim, what (``used_for``: then
it is in-sample). A run pipesim cannot state yet (sharded data parallelism beyond ZeRO-1,
context parallelism) says why (:attr:`PublishedRun.unstatable`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from pipesim.config.recipe import Recipe
from pipesim.config.recipes import named_recipe
from pipesim.engine import SimulationResult
from pipesim.files.toml_reader import parse_toml
from pipesim.hardware import hardware
from pipesim.hardware.catalogue import HardwareSpec
from pipesim.hardware.network import Link
from pipesim.parallel.config import Parallelism, Recompute
from pipesim.workload.architecture import Attention, Mlp, Position, TransformerArchitecture
from pipesim.workload.catalogue import (
    MOE_MODELS,
    from_architecture,
    llama_architecture,
    moe_architecture,
)
from pipesim.workload.model import Model
from pipesim.workload.moe import MixtureOfExperts
from validation.reproduce.common import simulate_megatron_layout
from validation.reproduce.framework import Sample

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
# The sharding a source names -> pipesim's ZeRO stage (FSDP: PyTorch's fully_shard, ZeRO-3).
ZERO_STAGE_OF = {"zero-0": 0, "zero-1": 1, "zero-2": 2, "zero-3": 3, "fsdp": 3}
# What pipesim cannot state: hybrid sharding (HSDP).
UNSTATABLE_SHARDING = ("hsdp",)


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
    expert_parallel: int = 1
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
        if self.sharding in UNSTATABLE_SHARDING:
            return f"{self.sharding} sharding is not modelled"
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
        cp = f" CP={self.run.context}" if self.run.context > 1 else ""
        ep = f" EP={self.run.expert_parallel}" if self.run.expert_parallel > 1 else ""
        return (
            f"T={self.run.tensor}{sp}{cp}{ep} P={self.run.pipeline}{v} D={self.run.data} "
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
        parallelism = Parallelism(
            tensor=run.tensor,
            sequence_parallel=self.sequence_parallel,
            recompute=Recompute.parse(self.recompute if recompute is None else recompute),
            zero=self.zero,
            data=run.data,
            context=run.context,
            expert=run.expert_parallel,
        )
        return simulate_megatron_layout(
            self.model,
            self.spec,
            parallelism,
            recipe or self.recipe,
            run.pipeline,
            self.chunks if chunks is None else chunks,
            b,
            run.global_batch // (run.data * b),
        )


# What a ``family = "catalogue"`` table may restate of its catalogue model (the run's own
# sequence, depth or tokenizer).
CATALOGUE_OVERRIDES = ("layers", "seq", "vocab")


def _architecture(table: Mapping[str, Any]) -> TransformerArchitecture:
    """The model shape of a ``[run.model]`` table: GPT (learned positions, GELU, LayerNorm,
    tied embeddings, biases, dropout), BLOOM (GPT's with ALiBi: no position embedding), Llama
    (RoPE, SwiGLU, RMSNorm, untied, no biases, no dropout, grouped-query attention), ``moe``
    (Llama's block with every MLP a mixture of ``experts`` gated experts of ``expert_ffn``,
    ``top_k`` per token, and ``capacity_factor`` where the run drops or pads to a capacity:
    :func:`pipesim.workload.catalogue.moe_architecture`) or ``catalogue`` (a catalogue
    mixture-of-experts model by ``name``, e.g. ``mixtral-8x7b``, with the run's ``layers``,
    ``seq`` or ``vocab`` where it states them)."""
    family = table["family"]
    if family == "catalogue":
        if table["name"] not in MOE_MODELS:
            raise ValueError(f"{DATA_FILE}: no catalogue MoE model {table['name']!r}")
        arch = MOE_MODELS[table["name"]][0]
        stated: dict[str, Any] = {
            key: int(table[key]) for key in CATALOGUE_OVERRIDES if key in table
        }
        return dataclasses.replace(arch, **stated)
    if family == "moe":
        moe = MixtureOfExperts(
            int(table["experts"]),
            int(table["top_k"]),
            int(table["expert_ffn"]),
            capacity_factor=table.get("capacity_factor"),
        )
        return moe_architecture(
            int(table["layers"]),
            int(table["hidden"]),
            int(table["heads"]),
            int(table["ffn"]),
            int(table["vocab"]),
            moe,
            kv_heads=int(table.get("kv_heads", table["heads"])),
            seq=int(table["seq"]),
        )
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


def recompute_options(framework_recipe: str) -> tuple[str, ...]:
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
        zero = ZERO_STAGE_OF[run.sharding]
    if run.inter_node_bytes_per_s_per_gpu is None:
        missing.append("network")
    draft = FilledRun(
        run, recipe, model, _spec(run), chunks, b, run.recompute or "none", sp, zero, dtype, ()
    )
    if run.recompute is None:
        missing.append("recompute")
        for option in recompute_options(run.source.recipe):
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
