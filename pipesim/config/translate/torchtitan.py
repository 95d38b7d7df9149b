"""torchtitan's job TOML files read into a pipesim :class:`~pipesim.config.run_file.RunFile`,
and a run written as one.

The key names, defaults and behaviours are those of pytorch/torchtitan at
:data:`TORCHTITAN_COMMIT` (2026-02-23), the last commit that ships TOML train configs (the next,
9810191, "Config System Refactor: TOML to Python Dataclass Registry (#2386)", replaced them by
Python). Every key of that commit's ``JobConfig`` (``torchtitan/config/job_config.py``) is in
exactly one of three tables:

* :data:`MAPPED`: read into the run (the model, the batch, the precision, the parallel degrees,
  context parallelism included, and FSDP, the pipeline, the activation checkpointing, the
  optimizer) or checked (expert parallelism, which a llama3 has nothing for); a value pipesim
  cannot state is refused in one line naming the key.
* :data:`REFUSED`: features pipesim does not model (float8, torch.compile, async tensor
  parallelism, ...): accepted only at the value that switches them off, refused otherwise, one
  line naming every such key.
* :data:`COST_NEUTRAL`: what changes neither a step's time nor its memory (the job's folders,
  profiling, metrics, checkpoints, the learning-rate schedule, datasets, timeouts): ignored and
  listed when ``allow_ignored``, else refused with the hint to allow them.

``training.batch_size``, ``local_batch_size``'s name in older layouts, is read as it. A key in
none of the tables is not torchtitan's and is refused. A key left out takes torchtitan's
default, not pipesim's (``training.seq_len`` 2048, ``activation_checkpoint.mode`` selective
every 2nd layer, ``parallelism.data_parallel_shard_degree`` -1...).

How torchtitan runs a file, and so how it is read:

* **World size and FSDP.** The world is the product of the degrees, dp_replicate x dp_shard x
  cp x tp x pp (torchtitan's ``ParallelDims._validate``); ``data_parallel_shard_degree = -1``
  is "the rest of the world", so a file with it needs ``world_size``. Resolved to 1, and
  without context parallelism, it means no sharding at all (plain tensor/pipeline parallelism,
  or DDP); above 1, or with a context-parallel degree above 1 (``fsdp_enabled``), it is FSDP2
  (``fully_shard`` of each block, ``apply_fsdp`` in
  ``torchtitan/models/llama3/infra/parallelize.py``) over the ``fsdp`` mesh of dp_shard x cp:
  ``zero = 3`` over pipesim's D x CP, ``data_parallel`` = the shard degree, the replicas the
  batch is split over (ParallelDims' ``batch`` mesh; the CP ranks share their samples).
  ``parallelism.fsdp_reshard_after_forward`` (``default``: reshard only without a pipeline,
  ``always``, ``never``, the same three words as pipesim's) is the run's
  ``reshard_after_forward``. The shipped Llama 3 configs use FSDP and translate.
* **HSDP and DDP.** A replicate degree above 1 beside FSDP (a shard or context-parallel degree
  above 1) is HSDP (FSDP groups replicated), which pipesim does not model (it shards over all
  D x CP ranks): refused. Without FSDP, torchtitan refuses a replicate degree above 1 beside
  any other parallelism ("DDP has not supported > 1D parallelism",
  ``torchtitan/models/llama3/infra/parallelize.py``), and so does this reader.
* **Precision.** ``mixed_precision_param`` takes effect through FSDP (its
  ``MixedPrecisionPolicy``, whatever the tensor and pipeline degrees), or through autocast when
  nothing but DDP is used; with tensor or pipeline parallelism and no FSDP torchtitan trains in
  ``training.dtype``, float32 by default (``maybe_enable_amp``,
  ``torchtitan/distributed/utils.py``). So bfloat16 (``dtype = "bf16"``: 2-byte weights and
  activations, the fp32 parameter as the master copy, fp32 gradients) is read under FSDP, DDP
  and on one device, and float32 otherwise: an fp32 model (4-byte weights, activations and
  gradients, no master copy) stated inline. ``mixed_precision_reduce``, the dtype of FSDP's
  gradient reduce-scatter, takes only ``float32`` at the commit (JobConfig's
  ``Literal["float32"]``): the models' 4-byte gradients; another value is refused.
  ``training.dtype = "bfloat16"`` (bf16 gradients and optimizer state) is refused.
* **The model.** ``llama3`` flavors 8B, 70B and 405B at seq 8192 and bf16 are the catalogue's
  ``llama3-8b``/``70b``/``405b``, by name. A run file cannot state the sequence of a named
  model, so another ``seq_len``, float32, or the ``debugmodel`` flavor give the model inline,
  built like the catalogue's Llama (:func:`pipesim.workload.catalogue.llama`) from the flavor's
  arguments, its FFN width computed as torchtitan computes it (:func:`ffn_width`).
* **Batch and micro-batches.** ``local_batch_size`` is per data-parallel rank;
  ``global_batch_size`` (-1: local x D) gives ``global / (local x D)`` gradient-accumulation
  steps. Without a pipeline every accumulation step is one micro-batch of ``local_batch_size``
  (pipesim's 1F1B on one device: micro-batch size = local batch, M = the accumulation steps).
  With a pipeline, ``M = local_batch_size / pipeline_parallel_microbatch_size`` and each
  accumulation step is a whole pipeline flush of its own (``torchtitan/train.py``), which
  pipesim does not simulate: more than one is refused.
* **Pipeline.** The schedule names are PyTorch's (``get_schedule_class``):
  :data:`SCHEDULES`. Stages per rank: one for ``GPipe`` and ``1F1B``, otherwise two, or as
  ``pipeline_parallel_layers_per_stage`` or ``module_fqns_per_model_part`` make them;
  ``InterleavedZeroBubble`` with one stage per rank is pipesim's ``zb-h1``. The partition is
  always stated: torchtitan's own split (the embedding and the output layer each weighing one
  layer, ``generate_llm_fqn_per_model_part``) in pipesim's layer counts (the embedding and the
  head are layers of their own).
* **Activation checkpointing.** ``none`` and ``full`` are pipesim's; ``selective`` with
  ``op`` is read as pipesim's selective recomputation (an approximation, said in the notes:
  torchtitan's op policy also re-runs every other matmul); ``selective`` with a number N
  checkpoints every N-th block a rank holds, read as pipesim's count of fully recomputed blocks
  per stage when every stage gets the same count (which blocks differs; time and memory do
  not), refused otherwise.
* **Context parallelism** (``context_parallel_degree``, CP) is PyTorch's ring attention over
  SDPA (``apply_cp_to_attention_module``), the sequence a multiple of tp x 2 x cp
  (``seq_len_divisor``). Its keys and values move as PyTorch's ``_cp_options.rotate_method``
  says: ``ALL_GATHER`` by default (one all-gather per attention, beside its first, local
  block), ``ALL_TO_ALL`` a ring of sends to the next rank. At the commit training never sets
  it: ``context_parallel_rotate_method`` reaches ``set_rotate_method`` only through
  validation's context (``validate.py``). So CP is read as ``cp_comm_type = "all-gather"``
  (PyTorch's overlap of the gather with the local block aside, said in the notes);
  ``alltoall`` is noted as read by validation alone, and refused beside ``validation.enable``
  (the ring from the first validation on: two regimes in one run). The load balancer must be
  ``headtail``, the causal 2 x CP split pipesim models.
* **Expert parallelism** (``expert_parallel_degree``, ``expert_tensor_parallel_degree``):
  ParallelDims' rules are checked (ETP 1 or T; the experts' mesh, efsdp x ep x etp, filling
  dp_shard x cp x tp), then the degree is noted and not stated: torchtitan's llama3 has no
  experts ("No effect for non-MoE models"), and pipesim refuses EP on a dense model.
* **What is not read.** Tensor parallelism is always sequence-parallel in torchtitan, so
  ``sequence_parallel`` follows it; ``tensor_across_nodes`` is left to pipesim (torchtitan
  places any T). The recipe is ``torchtitan``.

:func:`torchtitan_toml` writes a run back as such a file and names, never drops, what
torchtitan cannot express of it (ZeRO-1 and ZeRO-2: torchtitan shards only through FSDP;
DDP beside other parallelism, bf16 with tensor or pipeline parallelism and no FSDP, schedules
PyTorch lacks, a model that is not a torchtitan flavor, context parallelism by p2p or without
FSDP...). ZeRO-3 over D replicas is written as ``data_parallel_shard_degree = D`` with the
run's ``fsdp_reshard_after_forward``; CP as ``context_parallel_degree`` (FSDP over D x CP); EP
as ``expert_parallel_degree`` with ``expert_tensor_parallel_degree`` the run's ETP (T unless
stated; torchtitan takes ETP = T or 1, any other is named), named where the model has no
experts. A run's ETP without EP is not written (torchtitan reads ETP with EP > 1 only) and
is named.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.config.run_file import RunFile
from pipesim.errors import few, named, shown
from pipesim.files.toml_reader import read_toml
from pipesim.files.toml_writer import toml_text
from pipesim.parallel.config import Recompute
from pipesim.parallel.sharding import ReshardPolicy
from pipesim.schedules.registry import schedule_info, unsupported_reason
from pipesim.workload.catalogue import LLAMA_SHAPES, from_architecture, llama, resolve_model
from pipesim.workload.huggingface import MAX_SIZE
from pipesim.workload.model import Model

TORCHTITAN_COMMIT = "238fa9953e4aec2a62582121564273d7cbb1e9f1"
_AT = f"pytorch/torchtitan {TORCHTITAN_COMMIT[:7]}"
# PyTorch's pipelining schedules, as pipesim's recipes cite them.
_PYTORCH_AT = "pytorch/pytorch 00722e6"

# ---------------------------------------------------------------------------------------------
# The three tables: every key of JobConfig at TORCHTITAN_COMMIT (torchtitan/config/job_config.py)


@dataclass(frozen=True)
class Mapped:
    """A key read into the run: torchtitan's default when the file leaves it out, and what
    it becomes in pipesim."""

    default: object
    becomes: str


@dataclass(frozen=True)
class Refused:
    """A feature pipesim does not model: the values that switch it off (accepted), and why
    any other is refused."""

    inert: tuple[object, ...]
    why: str


# Defaults: torchtitan/config/job_config.py at TORCHTITAN_COMMIT.
MAPPED: Mapping[str, Mapped] = MappingProxyType(
    {
        "model.name": Mapped("llama3", "the model family: llama3 only"),
        "model.flavor": Mapped("debugmodel", "model: a catalogue llama3 by name, or inline"),
        "optimizer.name": Mapped("AdamW", "optimizer: Adam and AdamW are adam"),
        "optimizer.implementation": Mapped("fused", "a note: adam's step temporaries"),
        "training.local_batch_size": Mapped(8, "microbatches (with the microbatch size)"),
        "training.batch_size": Mapped(None, "training.local_batch_size's older name"),
        "training.global_batch_size": Mapped(-1, "batch; gradient-accumulation steps"),
        "training.seq_len": Mapped(2048, "the model's seq (inline when not the catalogue's)"),
        "training.dtype": Mapped("float32", "dtype under tensor/pipeline parallelism, no FSDP"),
        "training.mixed_precision_param": Mapped("bfloat16", "dtype under FSDP, DDP or one device"),
        "training.mixed_precision_reduce": Mapped(
            "float32", "checked: float32 only, the fp32 gradients FSDP reduce-scatters"
        ),
        "parallelism.data_parallel_replicate_degree": Mapped(1, "data_parallel (D) under DDP"),
        "parallelism.data_parallel_shard_degree": Mapped(
            -1, "above 1: zero = 3 (FSDP) over data_parallel (D) = the degree"
        ),
        "parallelism.fsdp_reshard_after_forward": Mapped(
            "default", "reshard_after_forward (under FSDP)"
        ),
        "parallelism.tensor_parallel_degree": Mapped(1, "tensor_parallel (T), sequence_parallel"),
        "parallelism.context_parallel_degree": Mapped(
            1, "context_parallel (CP); above 1 FSDP over dp_shard x cp (zero = 3)"
        ),
        "parallelism.context_parallel_rotate_method": Mapped(
            "allgather", "checked: training rotates with PyTorch's default all-gather"
        ),
        "parallelism.context_parallel_load_balancer": Mapped(
            "headtail", "checked: headtail, the causal split pipesim models (CP > 1)"
        ),
        "parallelism.expert_parallel_degree": Mapped(
            1, "checked against ParallelDims; no effect on llama3 (no experts)"
        ),
        "parallelism.expert_tensor_parallel_degree": Mapped(
            1, "checked: 1 or T with EP > 1 (ParallelDims)"
        ),
        "parallelism.pipeline_parallel_degree": Mapped(1, "pipeline_parallel (K)"),
        "parallelism.pipeline_parallel_schedule": Mapped("1F1B", "schedule"),
        "parallelism.pipeline_parallel_microbatch_size": Mapped(1, "microbatch_size (K > 1)"),
        "parallelism.pipeline_parallel_layers_per_stage": Mapped(None, "chunks (v)"),
        "parallelism.module_fqns_per_model_part": Mapped(None, "chunks (v) and partition"),
        "parallelism.pipeline_parallel_first_stage_less_layers": Mapped(1, "partition"),
        "parallelism.pipeline_parallel_last_stage_less_layers": Mapped(1, "partition"),
        "activation_checkpoint.mode": Mapped("selective", "recompute"),
        "activation_checkpoint.selective_ac_option": Mapped("2", "recompute"),
    }
)

REFUSED: Mapping[str, Refused] = MappingProxyType(
    {
        "parallelism.enable_async_tensor_parallel": Refused(
            (False,),
            "async tensor parallelism is torch.compile's micro-pipelining: torchtitan refuses "
            "it without compile.enable (torchtitan/distributed/tensor_parallel.py), whose "
            "kernel fusion pipesim does not model, so a recipe's tp_comm_overlap alone would "
            "not be this run",
        ),
        "parallelism.disable_loss_parallel": Refused(
            (False,), "the logits gathered whole for the loss are not modelled"
        ),
        "parallelism.pipeline_parallel_schedule_csv": Refused(
            ("",),
            "a schedule from a CSV file is not translated (pipesim reads its own compute-only "
            "CSV schedules apart)",
        ),
        "model.converters": Refused(
            ([],),
            "float8/MX converters change the matmuls' speed, which pipesim's costs do not model",
        ),
        "compile.enable": Refused(
            (False,),
            "torch.compile fuses kernels (time and activation memory), which "
            "pipesim's per-layer costs do not model",
        ),
        "training.enable_cpu_offload": Refused(
            (False,), "offloading to CPU memory is not modelled"
        ),
        "training.gc_debug": Refused(
            (False,), "a garbage collection every step costs time pipesim does not model"
        ),
        "optimizer.early_step_in_backward": Refused(
            (False,),
            "the optimizer step inside the backward (gradients freed early) is not modelled",
        ),
        "activation_checkpoint.early_stop": Refused(
            (False,), "stopping recomputation early is not modelled"
        ),
        "activation_checkpoint.debug": Refused(
            (False,), "checkpointing's debug capture costs time pipesim does not model"
        ),
        "fault_tolerance.enable": Refused(
            (False,), "torchft's fault tolerance (HSDP with dynamic replicas) is not modelled"
        ),
        "debug.deterministic": Refused(
            (False,), "deterministic kernels are slower in ways pipesim does not model"
        ),
        "comm.mode": Refused(
            ("default",), "a fake or local-tensor backend is a dry run, not training"
        ),
    }
)

_OUTPUT = "output and logging only"
_LR = "the learning rate's value, not a step's work"
_CHECKPOINT = "checkpoint saving and loading happen between steps"
_DATA = "the data's source (pipesim takes the input as ready)"
_ONLY_EP = "read only for an MoE model's experts; llama3 has none"
_ONLY_CONVERTER = "configures a converter; converters themselves (model.converters) are refused"
_ONLY_COMPILE = "read only with compile.enable, which is refused"
_ONLY_FT = "read only with fault_tolerance.enable, which is refused"
_VALIDATION = "validation runs between training steps"
_OPTIMIZER_VALUE = "the optimizer's hyper-parameters, not its work or memory"


def _same(prefix: str, names: str, why: str) -> dict[str, str]:
    """``{prefix + name: why}`` for each of the space-separated ``names``."""
    return {f"{prefix}{name}": why for name in names.split()}


COST_NEUTRAL: Mapping[str, str] = MappingProxyType(
    {
        **_same(
            "job.",
            "config_file dump_folder description print_config save_config_file "
            "custom_config_module",
            _OUTPUT,
        ),
        **_same(
            "profiling.",
            "enable_profiling save_traces_folder profile_freq profiler_active profiler_warmup "
            "enable_memory_snapshot save_memory_snapshot_folder",
            "profiling (its traced steps aside)",
        ),
        **_same(
            "metrics.",
            "log_freq enable_tensorboard disable_color_printing save_tb_folder "
            "save_for_all_ranks enable_wandb",
            _OUTPUT,
        ),
        "model.hf_assets_path": "where the tokenizer and weights are read from",
        "model.tokenizer_path": "where the tokenizer is read from (deprecated)",
        "model.print_after_conversion": _OUTPUT,
        **_same("optimizer.", "lr beta1 beta2 eps weight_decay", _OPTIMIZER_VALUE),
        **_same(
            "lr_scheduler.", "warmup_steps total_steps decay_ratio decay_type min_lr_factor", _LR
        ),
        "training.dataset": _DATA,
        "training.dataset_path": _DATA,
        "training.max_norm": "gradient clipping's threshold (the norm is a small reduction)",
        "training.steps": "how many steps the job runs, not what one costs",
        "training.gc_freq": "Python's garbage collection between steps",
        **_same(
            "training.dataloader.",
            "num_workers persistent_workers pin_memory prefetch_factor",
            _DATA,
        ),
        "parallelism.pipeline_parallel_expert_parallel_overlap": _ONLY_EP,
        "parallelism.expert_parallel_comm_backend": _ONLY_EP,
        **_same(
            "checkpoint.",
            "enable enable_ft_dataloader_checkpoints folder interval initial_load_path "
            "initial_load_model_only initial_load_in_hf initial_load_in_hf_quantized "
            "last_save_model_only last_save_in_hf export_dtype async_mode keep_latest_k "
            "load_step exclude_from_loading enable_first_step_checkpoint "
            "create_seed_checkpoint load_only",
            _CHECKPOINT,
        ),
        "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns": (
            "MoE router shapes; llama3 has none"
        ),
        "activation_checkpoint.memory_budget": "read only with mode memory_budget, refused",
        "activation_checkpoint.visualize_memory_budget_pareto": _OUTPUT,
        "activation_checkpoint.preserve_rng_state": "the RNG state saved per checkpoint (bytes)",
        "activation_checkpoint.determinism_check": "a check on recomputed tensors' metadata",
        "compile.components": _ONLY_COMPILE,
        "compile.backend": _ONLY_COMPILE,
        **_same(
            "quantize.",
            "linear.float8.enable_fsdp_float8_all_gather "
            "linear.float8.precompute_float8_dynamic_scale_for_fsdp linear.float8.recipe_name "
            "linear.float8.filter_fqns linear.float8.emulate "
            "linear.mx.mxfp8_dim1_cast_kernel_choice linear.mx.recipe_name linear.mx.filter_fqns "
            "grouped_mm.float8.fqns grouped_mm.mx.recipe_name grouped_mm.mx.fqns",
            _ONLY_CONVERTER,
        ),
        **_same(
            "comm.",
            "init_timeout_seconds train_timeout_seconds trace_buf_size save_traces_folder "
            "save_traces_file_prefix",
            "communication timeouts and the flight recorder's traces",
        ),
        **_same("memory_estimation.", "enable disable_fake_mode", "an estimate before training"),
        **_same(
            "fault_tolerance.",
            "process_group process_group_timeout_ms replica_id group_size min_replica_size "
            "semi_sync_method",
            _ONLY_FT,
        ),
        "experimental.custom_import": "an import (a custom model is still refused by name)",
        "experimental.custom_args_module": _OUTPUT,
        **_same(
            "validation.",
            "enable dataset dataset_path local_batch_size seq_len freq steps "
            "dataloader.num_workers dataloader.persistent_workers dataloader.pin_memory "
            "dataloader.prefetch_factor",
            _VALIDATION,
        ),
        "debug.seed": "the random seed",
        "debug.deterministic_warn_only": "warnings only",
        "debug.moe_force_load_balance": _ONLY_EP,
    }
)

# ---------------------------------------------------------------------------------------------
# Models: torchtitan/models/llama3/__init__.py (llama3_args) and model/args.py at the commit


@dataclass(frozen=True)
class Flavor:
    """A Llama 3 flavor's ``TransformerModelArgs`` (the fields that shape the model; defaults as
    ``torchtitan/models/llama3/model/args.py`` has them)."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int | None = None
    vocab_size: int = 128256
    multiple_of: int = 256
    ffn_dim_multiplier: float | None = None
    rope_theta: float = 10000

    @property
    def kv_heads(self) -> int:
        """Key/value heads (None: as many as the query heads)."""
        return self.n_kv_heads or self.n_heads

    @property
    def ffn(self) -> int:
        """The SwiGLU's inner width, as torchtitan's ``FeedForward`` computes it."""
        return ffn_width(self.dim, self.multiple_of, self.ffn_dim_multiplier)


def ffn_width(dim: int, multiple_of: int, ffn_dim_multiplier: float | None) -> int:
    """torchtitan's ``FeedForward.__init__`` (``torchtitan/models/llama3/model/model.py``): from
    4 x dim, two thirds, times the multiplier, rounded up to a multiple of ``multiple_of``."""
    hidden = int(2 * (4 * dim) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


# torchtitan/models/llama3/__init__.py at TORCHTITAN_COMMIT: llama3_args.
FLAVORS: Mapping[str, Flavor] = MappingProxyType(
    {
        "debugmodel": Flavor(256, 6, 16, vocab_size=2048, rope_theta=500000),
        "8B": Flavor(4096, 32, 32, 8, multiple_of=1024, ffn_dim_multiplier=1.3, rope_theta=500000),
        "70B": Flavor(8192, 80, 64, 8, multiple_of=4096, ffn_dim_multiplier=1.3, rope_theta=500000),
        "405B": Flavor(
            16384, 126, 128, 8, multiple_of=4096, ffn_dim_multiplier=1.2, rope_theta=500000
        ),
    }
)
# The same file's flavors with attention pipesim does not model (attn_type, attn_mask_type).
UNMODELLED_FLAVORS: Mapping[str, str] = MappingProxyType(
    {
        "debugmodel_flex_attn": "FlexAttention with block-causal masks",
        "debugmodel_varlen_attn": "varlen attention with block-causal masks",
        "8B_flex": "FlexAttention with block-causal masks",
        "8B_varlen": "varlen attention with block-causal masks",
    }
)
# The flavors that are catalogue models (pipesim.workload.catalogue.LLAMA_SHAPES).
CATALOGUE_NAMES: Mapping[str, str] = MappingProxyType(
    {"8B": "llama3-8b", "70B": "llama3-70b", "405B": "llama3-405b"}
)
_FLAVOR_OF_NAME = {name: flavor for flavor, name in CATALOGUE_NAMES.items()}
_CATALOGUE_SEQ = 6  # LLAMA_SHAPES' field: the sequence length


def flavor_model(flavor: str, seq_len: int, precision: str) -> str | Model:
    """The model torchtitan trains for ``flavor`` at ``seq_len`` in ``precision`` ("bf16":
    mixed precision; "fp32"): the catalogue's name where it is one, else a :class:`Model` built
    as the catalogue builds a Llama, with the flavor's shape, that sequence and, in fp32, 4-byte
    weights, activations and gradients and no master copy."""
    name = CATALOGUE_NAMES.get(flavor)
    if name and precision == "bf16" and seq_len == LLAMA_SHAPES[name][_CATALOGUE_SEQ]:
        return name
    base = llama("llama3-8b")  # the catalogue's reading of a Llama 3: flags and bytes
    if base.architecture is None:
        raise SpecError("the catalogue's llama3-8b has no architecture to build a flavor from")
    args = FLAVORS[flavor]
    fp32 = precision == "fp32"
    arch = dataclasses.replace(
        base.architecture,
        layers=args.n_layers,
        hidden=args.dim,
        heads=args.n_heads,
        kv_heads=args.kv_heads,
        ffn=args.ffn,
        vocab=args.vocab_size,
        seq=seq_len,
        element_bytes=4 if fp32 else base.architecture.element_bytes,
    )
    label = f"llama3-{flavor.lower()}-seq{seq_len}" + ("-fp32" if fp32 else "")
    return from_architecture(
        label,
        arch,
        dtype="fp32" if fp32 else base.dtype,
        default_batch=base.default_batch,
        description=f"torchtitan's llama3 {flavor} ({_AT}) at seq {seq_len}, {precision}",
        weight_bytes=4.0 if fp32 else base.weight_bytes_per_parameter,
        gradient_bytes=base.gradient_bytes_per_parameter,
        optimizer_bytes=base.optimizer_bytes_per_parameter,
        master_weight_bytes=0.0 if fp32 else base.master_weight_bytes_per_parameter,
        optimizer_temporary_bytes=base.optimizer_temporary_bytes_per_parameter,
    )


# ---------------------------------------------------------------------------------------------
# Schedules: torch/distributed/pipelining/schedules.py get_schedule_class (_PYTORCH_AT), the
# names torchtitan's pipeline_parallel_schedule takes (case-insensitive), and pipesim's.

SCHEDULES: Mapping[str, str] = MappingProxyType(
    {
        "GPipe": "gpipe",
        "1F1B": "1f1b",
        "Interleaved1F1B": "interleaved-1f1b",
        "LoopedBFS": "looped-bfs",
        "InterleavedZeroBubble": "interleaved-zb",
        "ZBVZeroBubble": "zbv",
        "DualPipeV": "dualpipev",
    }
)
# PipelineScheduleSingle's subclasses: one stage per rank; the rest are PipelineScheduleMulti.
SINGLE_STAGE = frozenset({"GPipe", "1F1B"})
# Stages placed in a V (torchtitan's pipeline_module_split: style "v"), two per rank.
V_STYLE = frozenset({"ZBVZeroBubble", "DualPipeV"})
# The base classes get_schedule_class also names: they run a schedule read from a CSV file.
CSV_ONLY = frozenset({"PipelineScheduleSingle", "PipelineScheduleMulti"})
# pipesim's name -> torchtitan's: the inverse of SCHEDULES, and zb-h1, PyTorch's
# ScheduleInterleavedZeroBubble with one stage per rank.
WRITTEN_SCHEDULES: Mapping[str, str] = MappingProxyType(
    {**{ours: theirs for theirs, ours in SCHEDULES.items()}, "zb-h1": "InterleavedZeroBubble"}
)

_EMBEDDING = "tok_embeddings"
_HEAD = ("norm", "output")
_PRECISIONS = {"bfloat16": "bf16", "float32": "fp32"}
_OPTIMIZERS = {"Adam": "adam", "AdamW": "adam"}  # torchtitan/components/optimizer.py

# ---------------------------------------------------------------------------------------------
# Reading


def run_from_torchtitan(
    path: str | Path,
    *,
    hardware: str,
    world_size: int | None = None,
    allow_ignored: bool = False,
) -> tuple[RunFile, tuple[str, ...]]:
    """The run a torchtitan job TOML describes, on ``hardware``, and notes: the cost-neutral
    keys ignored (only with ``allow_ignored``) and the approximations made, one line each.

    ``world_size`` is needed when a degree is -1 (else one line says so); given beside full
    degrees it must equal their product. ``data_parallel_shard_degree = -1`` takes the devices
    the other degrees leave: 1 when tensor, pipeline and replicate degrees fill the world (no
    sharding: plain TP/PP, or DDP), FSDP otherwise (ZeRO-3 over them). Anything pipesim cannot
    state as torchtitan runs it is a :class:`SpecError` of one line naming the file and the key
    (see the module docstring)."""
    where = f"torchtitan file {str(path)!r}"
    table = read_toml(path, "torchtitan")
    try:
        return _translate(table, hardware, world_size, allow_ignored, Path(path).parent)
    except SpecError as error:
        raise SpecError(f"{where}: {error}") from None


def flat_keys(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A parsed TOML file as ``{"section.key": value}``, nested tables (``[quantize.linear.
    float8]``, ``[training.dataloader]``) joined with dots."""
    found: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            found.update(flat_keys(value, dotted + "."))
        else:
            found[dotted] = value
    return found


@dataclass(frozen=True)
class _File:
    """A torchtitan file's keys, each read with torchtitan's default where it is absent."""

    keys: Mapping[str, Any]

    def get(self, key: str) -> Any:
        return self.keys[key] if key in self.keys else MAPPED[key].default

    def integer(self, key: str, least: int = 1) -> int:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise SpecError(f"{key} must be an integer >= {least}, got {shown(value)}")
        return value

    def text(self, key: str, choices: Sequence[str] | None = None) -> str:
        value = self.get(key)
        if not isinstance(value, str) or (choices is not None and value not in choices):
            wanted = f"one of {', '.join(choices)}" if choices else "a string"
            raise SpecError(f"{key} must be {wanted}, got {shown(value)}")
        return value


def _translate(
    table: dict[str, Any],
    hardware: str,
    world_size: int | None,
    allow_ignored: bool,
    folder: Path,
) -> tuple[RunFile, tuple[str, ...]]:
    if world_size is not None:
        checks.positive_int("world_size", world_size)
    keys = flat_keys(table)
    _refuse(keys)
    file = _File(keys)
    flavor = _flavor(file)
    degrees = _degrees(file, world_size)  # HSDP is refused here, before the ignored keys
    notes: list[str] = _neutral(keys, allow_ignored)
    tensor, pipeline, data, context, fsdp = degrees
    seq = file.integer("training.seq_len")
    if seq > MAX_SIZE:  # a sequence no run trains at, refused before any layer is built
        raise SpecError(f"training.seq_len must be at most {MAX_SIZE:,}, got {seq:,}")
    if seq % (2 * tensor * context):
        raise SpecError(
            f"training.seq_len = {seq} must be divisible by tensor_parallel_degree x 2 x "
            f"context_parallel_degree = {2 * tensor * context} (ParallelDims.seq_len_divisor, "
            f"{_AT})"
        )
    comm = _context(file, context, notes)
    _experts(file, tensor, data if fsdp else 1, context, notes)
    precision = _precision(file, tensor, pipeline, fsdp, notes)
    reshard = _reshard(file, fsdp, notes)
    model = flavor_model(flavor, seq, precision)
    if isinstance(model, Model):
        notes.append(
            f"model.flavor = {flavor!r}: stated inline as {model.name!r} (the catalogue names "
            "llama3 8B, 70B and 405B at seq 8192 in bf16 only)"
        )
    layout = _layout(file, FLAVORS[flavor].n_layers, pipeline, data)
    recompute = _recompute(file, layout, notes)
    optimizer = _optimizer(file, notes)
    run = RunFile(
        model,
        hardware,
        batch=layout.batch,
        microbatch_size=layout.microbatch_size,
        optimizer=optimizer,
        dtype=precision,
        tensor_parallel=tensor,
        sequence_parallel=tensor > 1,
        pipeline_parallel=pipeline,
        data_parallel=data,
        zero=3 if fsdp else 0,
        reshard_after_forward=reshard,
        context_parallel=context if context > 1 else None,
        cp_comm_type=comm,
        recompute=recompute,
        schedule=layout.schedule,
        chunks=layout.chunks,
        microbatches=layout.microbatches,
        partition=",".join(map(str, layout.partition)),
        remat=False,
        recipe="torchtitan",
        folder=folder,
    )
    return run, tuple(notes)


def _refuse(keys: Mapping[str, Any]) -> None:
    """Refuse keys torchtitan does not have and features pipesim does not model (all of them
    in one line): what would stop a user first is said first."""
    unknown = sorted(
        k for k in keys if k not in MAPPED and k not in REFUSED and k not in COST_NEUTRAL
    )
    if unknown:
        raise SpecError(f"unknown key(s) {few(unknown)}: not in torchtitan's JobConfig ({_AT})")
    refusals = [
        f"{key} = {shown(keys[key])}: {rule.why}"
        for key, rule in REFUSED.items()
        if key in keys and not _inert(keys[key], rule.inert)
    ]
    if refusals:
        raise SpecError("; ".join(refusals))


def _neutral(keys: Mapping[str, Any], allow_ignored: bool) -> list[str]:
    """The cost-neutral keys, as notes, or refused without ``allow_ignored``."""
    neutral = [key for key in keys if key in COST_NEUTRAL]
    if neutral and not allow_ignored:
        raise SpecError(
            f"{few(neutral)} change neither a step's time nor its memory and are not "
            f"translated; {named('allow_ignored')} ignores them"
        )
    return [f"{key}: ignored ({COST_NEUTRAL[key]})" for key in neutral]


def _inert(value: object, inert: tuple[object, ...]) -> bool:
    """Whether ``value`` is one of ``inert`` (of the same type: true is not 1)."""
    return any(type(value) is type(choice) and value == choice for choice in inert)


def _flavor(file: _File) -> str:
    """The flavor, refused unless a llama3 flavor pipesim can build."""
    name = file.text("model.name")
    if name != "llama3":
        raise SpecError(f"model.name = {name!r}: pipesim translates torchtitan's llama3 only")
    flavor = file.text("model.flavor")
    if flavor in UNMODELLED_FLAVORS:
        raise SpecError(
            f"model.flavor = {flavor!r}: {UNMODELLED_FLAVORS[flavor]} is not modelled "
            "(pipesim's attention is causal SDPA)"
        )
    if flavor not in FLAVORS:
        raise SpecError(
            f"model.flavor = {flavor!r}: not a llama3 flavor of {_AT} (known: {', '.join(FLAVORS)})"
        )
    return flavor


def _degrees(file: _File, world_size: int | None) -> tuple[int, int, int, int, bool]:
    """(T, K, D, CP, FSDP): torchtitan's ParallelDims with -1 resolved against ``world_size``
    (the world is dp_replicate x dp_shard x cp x tp x pp); FSDP (``fsdp_enabled``: a shard
    degree above 1, or CP above 1) shards over dp_shard x cp, pipesim's ZeRO-3 over D x CP with
    D the shard degree; D is the replicate degree otherwise. HSDP (a replicate degree above 1
    beside FSDP) and DDP beside other parallelism refused."""
    replicate = file.integer("parallelism.data_parallel_replicate_degree")
    tensor = file.integer("parallelism.tensor_parallel_degree")
    pipeline = file.integer("parallelism.pipeline_parallel_degree")
    context = file.integer("parallelism.context_parallel_degree")
    key = "parallelism.data_parallel_shard_degree"
    shard = file.get(key)  # JobConfig's default -1: the rest of the world
    if isinstance(shard, bool) or not isinstance(shard, int) or (shard < 1 and shard != -1):
        raise SpecError(f"{key} must be -1 or an integer >= 1, got {shown(shard)}")
    others = replicate * context * tensor * pipeline
    if shard == -1:
        if world_size is None:
            raise SpecError(
                f"{key} = -1 is the rest of the world: give world_size (the devices in all)"
            )
        if world_size % others:
            raise SpecError(
                f"{key} = -1: world_size {world_size} is not a multiple of the other degrees' "
                f"product {others}"
            )
        shard = world_size // others
    elif world_size is not None and world_size != shard * others:
        raise SpecError(
            f"{key}: the degrees' product {shard * others} is not world_size {world_size}"
        )
    if shard > 1 or context > 1:  # ParallelDims.fsdp_enabled
        if replicate > 1:
            beside = f"{key} = {shard}" + (
                f" and parallelism.context_parallel_degree = {context}" if context > 1 else ""
            )
            raise SpecError(
                f"parallelism.data_parallel_replicate_degree = {replicate} beside {beside}: "
                f"HSDP (FSDP groups of dp_shard x cp = {shard * context} replicated {replicate} "
                "times) is not modelled; pipesim shards over all data-parallel and "
                "context-parallel ranks (give the product as the shard degree, or a replicate "
                "degree of 1)"
            )
        return tensor, pipeline, shard, context, True
    if replicate > 1 and replicate != replicate * tensor * pipeline:
        raise SpecError(
            f"parallelism.data_parallel_replicate_degree = {replicate} beside tensor or "
            "pipeline parallelism: torchtitan's DDP is one-dimensional ('DDP has not "
            f"supported > 1D parallelism', llama3/infra/parallelize.py, {_AT}); data "
            f"parallelism beside them is FSDP there ({key} > 1)"
        )
    return tensor, pipeline, replicate, 1, False


# PyTorch's ring attention (torch.distributed.tensor.experimental._attention): its rotaters,
# by context_parallel_rotate_method's names, as pipesim's cp_comm_type.
ROTATE_METHODS: Mapping[str, str] = MappingProxyType({"allgather": "all-gather", "alltoall": "p2p"})


def _context(file: _File, context: int, notes: list[str]) -> str | None:
    """The run's cp_comm_type (None without context parallelism). torchtitan's CP is PyTorch's
    ring attention over SDPA (``apply_cp_to_attention_module``), whose keys and values move by
    ``_cp_options.rotate_method``: ALL_GATHER by default (one all-gather per attention,
    overlapping its first, local block), ALL_TO_ALL a ring of sends to the next rank. At the
    commit training never sets it (``set_rotate_method`` is called by validation's context
    alone, validate.py), so training all-gathers: pipesim's all-gather, which nothing hides.
    ``alltoall`` takes effect after the first validation, which one run cannot state: refused
    with ``validation.enable``, noted without. The load balancer must be ``headtail`` (the
    causal 2 x CP split pipesim models)."""
    method_key = "parallelism.context_parallel_rotate_method"
    balancer_key = "parallelism.context_parallel_load_balancer"
    method = file.text(method_key, tuple(ROTATE_METHODS))
    balancer = file.get(balancer_key)
    if context == 1:
        for key in (method_key, balancer_key):
            if key in file.keys:
                notes.append(f"{key}: no effect without context parallelism")
        return None
    if balancer != "headtail":
        raise SpecError(
            f"{balancer_key} = {shown(balancer)}: pipesim models the head-tail split (each rank "
            "a chunk from each end, balancing the causal mask), torchtitan's 'headtail'"
        )
    if method != "allgather":
        if file.keys.get("validation.enable") is True:
            raise SpecError(
                f"{method_key} = {method!r} with validation.enable: training all-gathers the "
                "keys and values until the first validation sets PyTorch's rotater to the ring "
                f"(set_rotate_method, validate.py, {_AT}), a step pipesim cannot state as one"
            )
        notes.append(
            f"{method_key} = {method!r}: read by validation alone at {_AT}; training keeps "
            "PyTorch's default all-gather rotater"
        )
    notes.append(
        f"parallelism.context_parallel_degree = {context}: PyTorch's ring attention "
        "all-gathers the keys and values (its default rotater), read as cp_comm_type "
        "all-gather; PyTorch overlaps the gather with the first, local block, which pipesim "
        "does not"
    )
    return "all-gather"


def _experts(file: _File, tensor: int, shard: int, context: int, notes: list[str]) -> None:
    """ParallelDims' rules for expert parallelism (ETP 1 or T; the experts' mesh, efsdp x ep x
    etp, filling dp_shard x cp x tp), then a note: llama3 is dense, and JobConfig says EP has
    'No effect for non-MoE models', so the run states none (pipesim refuses EP without
    experts)."""
    key = "parallelism.expert_parallel_degree"
    tensor_key = "parallelism.expert_tensor_parallel_degree"
    expert = file.integer(key)
    expert_tensor = file.integer(tensor_key)
    if expert == 1:
        if tensor_key in file.keys and expert_tensor != 1:
            notes.append(f"{tensor_key} = {expert_tensor}: no effect when ep = 1")
        return
    if expert_tensor not in (1, tensor):
        raise SpecError(
            f"{tensor_key} = {expert_tensor} with tensor_parallel_degree = {tensor}: "
            f"'Currently we only support ETP=TP or ETP=1' (ParallelDims._validate, {_AT})"
        )
    ranks = shard * context * tensor
    if ranks % (expert * expert_tensor):
        raise SpecError(
            f"{key} = {expert}: the experts' mesh (efsdp x ep x etp) fills dp_shard x cp x tp "
            f"= {ranks} ranks, which ep x etp = {expert * expert_tensor} does not divide "
            f"(ParallelDims.build_mesh, {_AT})"
        )
    notes.append(
        f"{key} = {expert}: no effect on llama3, a dense model (JobConfig: 'No effect for "
        "non-MoE models'); not stated"
    )


def _precision(file: _File, tensor: int, pipeline: int, fsdp: bool, notes: list[str]) -> str:
    """pipesim's dtype: mixed_precision_param under FSDP, DDP or one device, training.dtype
    with tensor or pipeline parallelism and no FSDP (maybe_enable_amp,
    torchtitan/distributed/utils.py); mixed_precision_reduce checked."""
    train_dtype = file.text("training.dtype", tuple(_PRECISIONS))
    if train_dtype == "bfloat16":
        raise SpecError(
            "training.dtype = 'bfloat16': full bf16 training (bf16 gradients and optimizer "
            "state, no fp32 weights) is not a precision pipesim's Llama states"
        )
    param = file.text("training.mixed_precision_param", tuple(_PRECISIONS))
    reduce = file.get("training.mixed_precision_reduce")
    if reduce != "float32":
        raise SpecError(
            f"training.mixed_precision_reduce = {shown(reduce)}: JobConfig takes 'float32' only "
            f"(Literal['float32'], {_AT}): FSDP reduce-scatters fp32 gradients"
        )
    if fsdp or (tensor == 1 and pipeline == 1):
        return _PRECISIONS[param]
    if param != "float32":
        notes.append(
            f"training.mixed_precision_param = {param!r}: no effect with tensor or pipeline "
            "parallelism and no FSDP; torchtitan trains in training.dtype float32 "
            f"(maybe_enable_amp, torchtitan/distributed/utils.py, {_AT})"
        )
    return "fp32"


def _reshard(file: _File, fsdp: bool, notes: list[str]) -> str | None:
    """The run's reshard_after_forward: the file's policy under FSDP (None without)."""
    key = "parallelism.fsdp_reshard_after_forward"
    policy = file.text(key, tuple(policy.value for policy in ReshardPolicy))
    if fsdp:
        return policy
    if policy != ReshardPolicy.DEFAULT.value:
        notes.append(f"{key} = {policy!r}: no effect without FSDP (a shard degree of 1)")
    return None


def _optimizer(file: _File, notes: list[str]) -> str:
    """Adam or AdamW (torchtitan/components/optimizer.py's two) as pipesim's adam."""
    name = file.text("optimizer.name")
    if name not in _OPTIMIZERS:
        raise SpecError(f"optimizer.name = {name!r}: torchtitan builds Adam or AdamW only")
    implementation = file.text("optimizer.implementation", ("for-loop", "foreach", "fused"))
    if implementation != "foreach":
        notes.append(
            f"optimizer.implementation = {implementation!r}: pipesim's adam counts the foreach "
            "step's 4 bytes per parameter of temporaries"
        )
    return _OPTIMIZERS[name]


@dataclass(frozen=True)
class _Layout:
    """The pipeline as pipesim states it."""

    batch: int
    microbatch_size: int
    microbatches: int
    schedule: str
    chunks: int
    partition: tuple[int, ...]  # pipesim's layers per stage
    placement: tuple[tuple[int, ...], ...]  # each rank's stages, in the order it builds them


def _layout(file: _File, layers: int, pipeline: int, data: int) -> _Layout:
    """Batch, micro-batches, schedule, chunks and partition (see the module docstring)."""
    local = _local_batch(file)
    batch = file.integer("training.global_batch_size", least=-1)
    if batch == 0 or batch < -1:
        raise SpecError(f"training.global_batch_size must be -1 or >= 1, got {batch}")
    batch = local * data if batch == -1 else batch
    if batch % (local * data):
        raise SpecError(
            f"training.global_batch_size = {batch} is not a multiple of local_batch_size x "
            f"data-parallel degree = {local * data}"
        )
    accumulation = batch // (local * data)
    if pipeline == 1:
        return _Layout(batch, local, accumulation, "1f1b", 1, (layers + 2,), ((0,),))
    if accumulation > 1:
        raise SpecError(
            f"training.global_batch_size = {batch}: {accumulation} gradient-accumulation steps, "
            "each a pipeline flush of its own (torchtitan/train.py train_step), which pipesim "
            "does not simulate; make global_batch_size local_batch_size x data-parallel degree"
        )
    size = file.integer("parallelism.pipeline_parallel_microbatch_size")
    if local % size:
        raise SpecError(
            f"parallelism.pipeline_parallel_microbatch_size = {size} must divide "
            f"training.local_batch_size = {local}"
        )
    microbatches = local // size
    theirs = _schedule_name(file)
    partition = _partition(file, theirs, layers, pipeline)
    chunks = len(partition) // pipeline
    ours = "zb-h1" if theirs == "InterleavedZeroBubble" and chunks == 1 else SCHEDULES[theirs]
    reason = unsupported_reason(ours, pipeline, microbatches, chunks)
    if reason:
        given = file.get("parallelism.pipeline_parallel_schedule")
        raise SpecError(
            f"parallelism.pipeline_parallel_schedule = {given!r} (pipesim's {ours}) with "
            f"{pipeline} ranks, {microbatches} micro-batches, {chunks} stages per rank: {reason}"
        )
    placement = stage_placement(pipeline, chunks, theirs in V_STYLE)
    return _Layout(batch, size, microbatches, ours, chunks, partition, placement)


def _local_batch(file: _File) -> int:
    """training.local_batch_size, or batch_size, its older name."""
    if "training.batch_size" in file.keys:
        if "training.local_batch_size" in file.keys:
            raise SpecError("training.batch_size is local_batch_size's older name: give one")
        return file.integer("training.batch_size")
    return file.integer("training.local_batch_size")


def _schedule_name(file: _File) -> str:
    """The schedule as torchtitan spells it (get_schedule_class is case-insensitive)."""
    key = "parallelism.pipeline_parallel_schedule"
    given = file.text(key)
    by_lower = {name.lower(): name for name in SCHEDULES}
    if given.lower() in by_lower:
        return by_lower[given.lower()]
    if given.lower() in {name.lower() for name in CSV_ONLY}:
        raise SpecError(f"{key} = {given!r} runs a schedule from a CSV file: not translated")
    raise SpecError(
        f"{key} = {given!r}: not a schedule pipesim has (PyTorch's, {_PYTORCH_AT}: "
        f"{', '.join(SCHEDULES)})"
    )


def _partition(file: _File, theirs: str, layers: int, pipeline: int) -> tuple[int, ...]:
    """pipesim's layers per stage, as torchtitan's pipeline_llm splits the model."""
    parts = file.get("parallelism.module_fqns_per_model_part")
    per_stage = file.get("parallelism.pipeline_parallel_layers_per_stage")
    weights = (
        file.integer("parallelism.pipeline_parallel_first_stage_less_layers", least=0),
        file.integer("parallelism.pipeline_parallel_last_stage_less_layers", least=0),
    )
    stages = pipeline * (1 if theirs in SINGLE_STAGE else 2)
    if per_stage is not None:
        stages = _stages_for(file, theirs, layers, pipeline, weights)
    if parts is not None:
        counts = counts_from_modules(parts, layers)
        stages = len(counts)
    else:
        blocks = stage_blocks(stages, layers, *weights)
        counts = with_ends(blocks)
    key = "parallelism.module_fqns_per_model_part"
    if stages % pipeline:
        raise SpecError(f"{key}: {stages} stages do not divide among {pipeline} ranks")
    chunks = stages // pipeline
    if theirs in SINGLE_STAGE and chunks != 1:
        raise SpecError(f"{key}: {theirs} runs one stage per rank, got {chunks}")
    if theirs in V_STYLE and chunks != 2:
        raise SpecError(f"{key}: {theirs} places two stages per rank in a V, got {chunks}")
    if min(counts) < 1:
        raise SpecError(f"parallelism: torchtitan's split leaves an empty stage: {list(counts)}")
    return counts


def _stages_for(
    file: _File, theirs: str, layers: int, pipeline: int, weights: tuple[int, int]
) -> int:
    """The stages pipeline_parallel_layers_per_stage makes, with pipeline_llm's checks."""
    key = "parallelism.pipeline_parallel_layers_per_stage"
    per_stage = file.integer(key)
    stages = math.ceil((layers + sum(weights)) / per_stage)
    if stages % pipeline:
        raise SpecError(
            f"{key} = {per_stage}: {stages} stages do not divide among {pipeline} ranks"
        )
    per_rank = stages // pipeline
    if theirs in SINGLE_STAGE and per_rank != 1:
        raise SpecError(f"{key} = {per_stage}: {theirs} needs 1 stage per rank, got {per_rank}")
    if theirs not in SINGLE_STAGE and per_rank < 2:
        raise SpecError(f"{key} = {per_stage}: {theirs} needs 2 or more stages per rank")
    return stages


def stage_blocks(
    stages: int, layers: int, input_weight: int = 1, output_weight: int = 1
) -> tuple[int, ...]:
    """Transformer blocks per stage as torchtitan's ``generate_llm_fqn_per_model_part``
    (torchtitan/distributed/pipeline_parallel.py) splits ``layers`` blocks, the embedding and
    the output weighing ``input_weight`` and ``output_weight`` blocks."""
    if stages == 1:
        return (layers,)
    effective = layers + input_weight + output_weight
    if stages > effective:
        raise SpecError(f"parallelism: {stages} stages exceed the {effective} effective layers")
    each, extra = divmod(effective, stages)
    if input_weight > each or output_weight > each:
        raise SpecError(
            f"parallelism: a first/last stage weight ({input_weight}, {output_weight}) exceeds "
            f"the {each} layers per stage"
        )
    blocks, placed = [], 0
    for stage in range(stages):
        share = each + (1 if stage < extra else 0)
        if stage == 0:
            share -= input_weight
        elif stage == stages - 1:
            share -= output_weight
        taken = max(0, min(share, layers - placed))
        blocks.append(taken)
        placed += taken
    return tuple(blocks)


def with_ends(blocks: Sequence[int]) -> tuple[int, ...]:
    """Blocks per stage as pipesim's layers per stage: the embedding with the first stage, the
    head (final norm and output layer) with the last."""
    counts = list(blocks)
    counts[0] += 1
    counts[-1] += 1
    return tuple(counts)


def counts_from_modules(parts: object, layers: int) -> tuple[int, ...]:
    """pipesim's layers per stage from module_fqns_per_model_part, which must list the model in
    order: tok_embeddings first, layers.0 ... layers.N-1, norm and output last."""
    key = "parallelism.module_fqns_per_model_part"
    if (
        not isinstance(parts, list)
        or len(parts) < 2
        or not all(
            isinstance(part, list) and all(isinstance(name, str) for name in part) for part in parts
        )
    ):
        raise SpecError(f"{key} must be a list of 2 or more lists of module names")
    expected = [_EMBEDDING, *(f"layers.{i}" for i in range(layers)), *_HEAD]
    if [name for part in parts for name in part] != expected:
        raise SpecError(
            f"{key}: not the model in order (tok_embeddings, layers.0 ... layers.{layers - 1}, "
            "norm, output), the contiguous split a pipesim partition states"
        )
    blocks = [sum(name.startswith("layers.") for name in part) for part in parts]
    return with_ends(blocks)


def modules_from_counts(counts: Sequence[int], layers: int) -> list[list[str]]:
    """The module_fqns_per_model_part that splits the model as pipesim's ``counts`` do."""
    parts: list[list[str]] = []
    placed = 0
    for stage, count in enumerate(counts):
        blocks = count - (stage == 0) - (stage == len(counts) - 1)
        names = [f"layers.{i}" for i in range(placed, placed + blocks)]
        placed += blocks
        if stage == 0:
            names.insert(0, _EMBEDDING)
        if stage == len(counts) - 1:
            names.extend(_HEAD)
        parts.append(names)
    return parts


def stage_placement(pipeline: int, chunks: int, v_style: bool) -> tuple[tuple[int, ...], ...]:
    """Each rank's stages in the order it builds them (pipeline_module_split's
    _get_stage_indices): looped, or two in a V."""
    if v_style:
        return tuple((rank, 2 * pipeline - 1 - rank) for rank in range(pipeline))
    return tuple(tuple(rank + s * pipeline for s in range(chunks)) for rank in range(pipeline))


def layer_sac_counts(
    blocks: Sequence[int], placement: Sequence[Sequence[int]], every: int
) -> tuple[int, ...]:
    """Blocks per stage that torchtitan's layer-level selective checkpointing wraps: a count
    per process (rank) over the blocks of its stages in build order, every ``every``-th
    wrapped, 0 meaning all (``_apply_layer_sac``, torchtitan/distributed/
    activation_checkpoint.py)."""
    wrapped = [0] * len(blocks)
    for stages in placement:
        count = 0
        for stage in stages:
            for _ in range(blocks[stage]):
                count += 1
                if every == 0 or count % every == 0:
                    wrapped[stage] += 1
    return tuple(wrapped)


def recompute_of(wrapped: Sequence[int], blocks: Sequence[int]) -> str | None:
    """pipesim's recompute for ``wrapped`` fully recomputed blocks per stage (of ``blocks``):
    none, full, or N (the first N blocks of each stage); None when no one N gives them."""
    if not any(wrapped):
        return "none"
    if list(wrapped) == list(blocks):
        return "full"
    most = max(wrapped)
    if all(w == min(most, b) for w, b in zip(wrapped, blocks, strict=True)):
        return str(most)
    return None


def _recompute(file: _File, layout: _Layout, notes: list[str]) -> str:
    """pipesim's recompute from [activation_checkpoint] (see the module docstring)."""
    mode = file.text("activation_checkpoint.mode", ("none", "selective", "full", "memory_budget"))
    if mode in ("none", "full"):
        return mode
    if mode == "memory_budget":
        raise SpecError(
            "activation_checkpoint.mode = 'memory_budget': the compiler's min-cut choice of "
            "what to recompute is not modelled"
        )
    key = "activation_checkpoint.selective_ac_option"
    option = file.get(key)
    option = str(option) if isinstance(option, int) and not isinstance(option, bool) else option
    if option == "op":
        notes.append(
            f"{key} = 'op': read as pipesim's selective recomputation (the attention core); "
            "torchtitan's op policy also re-runs every other matmul, which pipesim does not count"
        )
        return "selective"
    if not isinstance(option, str) or not option.isdigit():
        raise SpecError(f"{key} must be 'op' or a number of layers, got {shown(option)}")
    blocks = _blocks(layout.partition)
    wrapped = layer_sac_counts(blocks, layout.placement, int(option))
    recompute = recompute_of(wrapped, blocks)
    if recompute is None:
        raise SpecError(
            f"{key} = {option!r}: torchtitan checkpoints one block in {option} of each rank, "
            f"{list(wrapped)} blocks of the stages' {list(blocks)}; pipesim's recompute is one "
            "count for every stage"
        )
    if recompute not in ("none", "full"):
        notes.append(
            f"{key} = {option!r}: one block in {option} checkpointed, read as the first "
            f"{recompute} blocks of each stage (the same count: the same time and memory)"
        )
    return recompute


def _blocks(partition: Sequence[int]) -> tuple[int, ...]:
    """Transformer blocks per stage of pipesim's layers per stage (the ends taken off)."""
    if len(partition) == 1:
        return (partition[0] - 2,)
    blocks = list(partition)
    blocks[0] -= 1
    blocks[-1] -= 1
    return tuple(blocks)


# ---------------------------------------------------------------------------------------------
# Writing


def torchtitan_toml(run: RunFile, model: Model | None = None) -> tuple[str, tuple[str, ...]]:
    """``run`` (a plan's run file: every layout field stated) as a torchtitan job TOML with
    :data:`TORCHTITAN_COMMIT`'s keys, and what torchtitan cannot express of it, one line each
    (also written as the file's opening comments). ``model`` is ``run``'s model resolved, when
    it is not a catalogue name or inline (a path the caller has read)."""
    lost: list[str] = []
    flavor, seq, precision = _writable_model(run, model, lost)
    tensor, pipeline, data = (
        run.tensor_parallel or 1,
        run.pipeline_parallel or 1,
        run.data_parallel or 1,
    )
    context, expert = run.context_parallel or 1, run.expert_parallel or 1
    # torchtitan's FSDP shards over dp_shard x cp, and always with CP (fsdp_enabled)
    fsdp = (run.zero == 3 and data > 1) or context > 1
    reshard = _written_reshard(run, fsdp, lost)
    _check_parallelism(run, tensor, pipeline, data, fsdp, lost)
    _check_context(run, context, lost)
    _check_experts(run, model, expert, (data if fsdp else 1) * context, lost)
    _check_precision(run, tensor, pipeline, precision, fsdp, lost)
    layers = FLAVORS[flavor].n_layers if flavor in FLAVORS else None
    parallelism, training, blocks = _written_layout(run, layers, pipeline, data, lost)
    document = {
        "job": {"dump_folder": "./outputs", "description": f"pipesim run on {run.hardware}"},
        "model": {"name": "llama3", "flavor": flavor},
        "optimizer": {"name": _written_optimizer(run, lost)},
        "training": {
            **training,
            "seq_len": seq,
            "mixed_precision_param": "bfloat16" if precision == "bf16" else "float32",
        },
        "parallelism": {
            "data_parallel_replicate_degree": 1 if fsdp else data,
            "data_parallel_shard_degree": data if fsdp else 1,
            **({"fsdp_reshard_after_forward": reshard} if fsdp else {}),
            "tensor_parallel_degree": tensor,
            **({"context_parallel_degree": context} if context > 1 else {}),
            **(
                {
                    "expert_parallel_degree": expert,
                    "expert_tensor_parallel_degree": run.expert_tensor_parallel or tensor,
                }
                if expert > 1
                else {}
            ),
            **parallelism,
        },
        "activation_checkpoint": _written_recompute(run, blocks, parallelism, lost),
    }
    _check_recipe(run, lost)
    header = [
        f"torchtitan job file written by pipesim (keys of {_AT})",
        *(f"not expressed: {line}" for line in lost),
    ]
    return toml_text(document, header=header), tuple(lost)


def _writable_model(run: RunFile, model: Model | None, lost: list[str]) -> tuple[str, int, str]:
    """(flavor, seq, precision) of ``run``'s model; a model that is no torchtitan flavor is
    named and written under its own name as the flavor (torchtitan then refuses it)."""
    if isinstance(run.model, str) and run.model in _FLAVOR_OF_NAME:
        name = run.model
        return _FLAVOR_OF_NAME[name], LLAMA_SHAPES[name][_CATALOGUE_SEQ], "bf16"
    if model is not None:
        found = model
    elif isinstance(run.model, Model):
        found = run.model
    else:
        found = resolve_model(run.located(run.model))
    match = _flavor_match(found)
    if match is not None:
        return match
    seq = found.architecture.seq if found.architecture is not None else 2048
    lost.append(
        f"model {found.name!r} is not a torchtitan llama3 flavor ({', '.join(FLAVORS)}): "
        "written as its own name, a flavor torchtitan lacks"
    )
    return found.name, seq, "fp32" if found.dtype == "fp32" else "bf16"


def _flavor_match(model: Model) -> tuple[str, int, str] | None:
    """The flavor, seq and precision :func:`flavor_model` builds ``model`` from, if any."""
    arch = model.architecture
    if arch is None:
        return None
    for flavor, args in FLAVORS.items():
        if args.n_layers != arch.layers or args.dim != arch.hidden:
            continue
        for precision in ("bf16", "fp32"):
            built = flavor_model(flavor, arch.seq, precision)
            if isinstance(built, str):
                built = llama(built)
            if dataclasses.replace(built, name=model.name) == model:
                return flavor, arch.seq, precision
    return None


def _written_reshard(run: RunFile, fsdp: bool, lost: list[str]) -> str:
    """fsdp_reshard_after_forward for the run's policy; one that does nothing here is named."""
    policy = run.reshard_after_forward or ReshardPolicy.DEFAULT.value
    if policy not in {p.value for p in ReshardPolicy}:
        lost.append(
            f"reshard_after_forward {policy}: not default, always or never; default written"
        )
        return ReshardPolicy.DEFAULT.value
    if not fsdp and policy != ReshardPolicy.DEFAULT.value:
        lost.append(
            f"reshard_after_forward {policy}: FSDP's alone (zero 3 over 2 or more replicas); "
            "not written"
        )
    return policy


def _check_parallelism(
    run: RunFile, tensor: int, pipeline: int, data: int, fsdp: bool, lost: list[str]
) -> None:
    """Name what torchtitan's parallelism cannot say of ``run``."""
    if data > 1 and tensor * pipeline > 1 and not fsdp:
        lost.append(
            f"data_parallel {data} beside tensor or pipeline parallelism without zero 3: "
            "torchtitan's DDP is one-dimensional (data parallelism beside them is FSDP there); "
            "written as data_parallel_replicate_degree, which torchtitan refuses"
        )
    if run.zero in (1, 2) and data > 1:
        lost.append(
            f"zero {run.zero}: torchtitan shards only through FSDP "
            "(data_parallel_shard_degree), which shards weights, gradients and optimizer state "
            "together (zero 3); written without sharding"
        )
    if tensor > 1 and run.sequence_parallel is False:
        lost.append(
            "sequence_parallel false: torchtitan's tensor parallelism is always sequence-parallel"
        )
    for attribute in ("memory_limit", "steps"):
        if getattr(run, attribute) is not None:
            lost.append(
                f"{attribute} {getattr(run, attribute)}: a simulation setting, not torchtitan's"
            )
    if run.remat:
        lost.append("remat: GPipe's re-materialization has no torchtitan counterpart")


def _check_context(run: RunFile, context: int, lost: list[str]) -> None:
    """Name what torchtitan's context parallelism cannot say of ``run``: its exchange is
    PyTorch's all-gather (the default rotater, which training does not change at the commit),
    and with CP it always shards through FSDP."""
    comm = run.cp_comm_type or "p2p"
    if context == 1:
        if comm != "p2p":
            lost.append(f"cp_comm_type {comm} without context parallelism: nothing is exchanged")
        return
    if comm != "all-gather":
        lost.append(
            f"cp_comm_type {comm}: torchtitan's ring attention all-gathers the keys and values "
            "(PyTorch's default rotater; context_parallel_rotate_method is read by validation "
            "alone)"
        )
    if run.zero != 3:
        lost.append(
            f"zero {run.zero or 0} with context_parallel {context}: torchtitan applies FSDP over "
            "dp_shard x cp whenever cp > 1 (ParallelDims.fsdp_enabled), which shards the weights "
            "too (zero 3); written so"
        )


def _check_experts(
    run: RunFile, model: Model | None, expert: int, ranks: int, lost: list[str]
) -> None:
    """Name expert parallelism torchtitan would not run as pipesim does: without experts
    (a llama3 flavor), or not dividing the written dp_shard x cp (the experts' mesh at etp =
    tp; without FSDP dp_shard is 1; at etp = 1 dp_shard x cp x tp); an expert tensor-parallel
    size other than T or 1, or one without EP (torchtitan reads etp with ep > 1 only)."""
    if expert == 1:
        if run.expert_tensor_parallel not in (None, run.tensor_parallel or 1):
            lost.append(
                f"expert_tensor_parallel {run.expert_tensor_parallel} without expert "
                "parallelism: torchtitan reads expert_tensor_parallel_degree with "
                "expert_parallel_degree > 1 only"
            )
        return
    if model is not None:
        found = model
    elif isinstance(run.model, Model):
        found = run.model
    else:
        found = resolve_model(run.located(run.model))
    if found.architecture is None or found.architecture.moe is None:
        lost.append(f"expert_parallel {expert}: the model has no experts for it to divide")
    tensor = run.tensor_parallel or 1
    expert_tensor = run.expert_tensor_parallel or tensor
    if expert_tensor not in (1, tensor):
        lost.append(
            f"expert_tensor_parallel {expert_tensor}: torchtitan's ParallelDims takes ETP = TP "
            "or ETP = 1 only ('Currently we only support ETP=TP or ETP=1')"
        )
    elif expert_tensor == 1 and tensor > 1:
        if (ranks * tensor) % expert:
            lost.append(
                f"expert_parallel {expert}: torchtitan's experts' mesh at etp = 1 needs it to "
                f"divide dp_shard x cp x tp = {ranks * tensor}"
            )
    elif ranks % expert:
        lost.append(
            f"expert_parallel {expert}: torchtitan's experts' mesh needs it to divide "
            f"dp_shard x cp = {ranks}"
        )


def _check_precision(
    run: RunFile, tensor: int, pipeline: int, precision: str, fsdp: bool, lost: list[str]
) -> None:
    """Name a precision torchtitan would not train ``run`` in."""
    dtype = run.dtype or precision
    if dtype != precision:
        lost.append(f"dtype {dtype} with a {precision} model: torchtitan's precision sets both")
    if precision == "bf16" and tensor * pipeline > 1 and not fsdp:
        lost.append(
            "bf16 with tensor or pipeline parallelism and no FSDP: torchtitan applies mixed "
            "precision only through FSDP (zero 3) or alone under DDP (maybe_enable_amp), so it "
            "trains this layout in float32"
        )
    if run.master_weights is not None and run.master_weights != (precision == "bf16"):
        lost.append(
            f"master_weights {run.master_weights}: torchtitan's {precision} has "
            f"{'an fp32 copy' if precision == 'bf16' else 'none'}"
        )


def _written_optimizer(run: RunFile, lost: list[str]) -> str:
    """AdamW for adam (or the model's own, unstated)."""
    if run.optimizer not in (None, "adam"):
        lost.append(f"optimizer {run.optimizer}: torchtitan builds Adam or AdamW; AdamW written")
    return "AdamW"


def _written_layout(
    run: RunFile, layers: int | None, pipeline: int, data: int, lost: list[str]
) -> tuple[dict[str, Any], dict[str, int], tuple[int, ...] | None]:
    """The [parallelism] pipeline keys, the [training] batch keys, and the blocks per stage."""
    size = run.microbatch_size or 1
    microbatches = run.microbatches or 1
    if run.batch is not None and run.batch != size * microbatches * data:
        lost.append(
            f"batch {run.batch}: not microbatch_size x microbatches x data_parallel = "
            f"{size * microbatches * data}, which is written"
        )
    if pipeline == 1:
        if (run.schedule or "1f1b") != "1f1b" or (run.chunks or 1) != 1:
            lost.append(
                f"schedule {run.schedule} with chunks {run.chunks} on one device: torchtitan "
                "accumulates gradients micro-batch by micro-batch (1F1B's order)"
            )
        training = {
            "local_batch_size": size,
            "global_batch_size": size * microbatches * data,
        }
        parallelism = {
            "pipeline_parallel_degree": 1,
            "pipeline_parallel_schedule": "1F1B",
            "pipeline_parallel_microbatch_size": size,
        }
        return parallelism, training, (layers,) if layers is not None else None
    training = {
        "local_batch_size": size * microbatches,
        "global_batch_size": size * microbatches * data,
    }
    parallelism, blocks = _written_pipeline(run, layers, pipeline, lost)
    return {"pipeline_parallel_microbatch_size": size, **parallelism}, training, blocks


def _written_pipeline(
    run: RunFile, layers: int | None, pipeline: int, lost: list[str]
) -> tuple[dict[str, Any], tuple[int, ...] | None]:
    """The schedule and, where torchtitan's own split is not the run's, the stages."""
    ours = run.schedule or "1f1b"
    theirs = WRITTEN_SCHEDULES.get(ours)
    if theirs is None:
        lost.append(f"schedule {ours}: PyTorch has no such schedule; 1F1B written in its place")
        ours, theirs = "1f1b", "1F1B"
    chunks = run.chunks or schedule_info(ours).default_chunks
    if theirs in SINGLE_STAGE or theirs in V_STYLE:
        fixed = 1 if theirs in SINGLE_STAGE else 2
        if chunks != fixed:
            lost.append(f"chunks {chunks}: torchtitan's {theirs} runs {fixed} per rank")
        chunks = fixed
    keys: dict[str, Any] = {
        "pipeline_parallel_degree": pipeline,
        "pipeline_parallel_schedule": theirs,
    }
    if layers is None:
        lost.append("partition: the model is not a torchtitan flavor, so its split is not written")
        return keys, None
    stages = pipeline * chunks
    own = with_ends(stage_blocks(stages, layers))
    counts = _wanted_counts(run, own, layers, lost)
    default_chunks = 1 if theirs in SINGLE_STAGE else 2
    if ours != "zb-h1" and counts == own:
        if chunks != default_chunks:
            per_stage = layers_per_stage_for(layers, stages)
            if per_stage is None:
                keys["module_fqns_per_model_part"] = modules_from_counts(counts, layers)
            else:
                keys["pipeline_parallel_layers_per_stage"] = per_stage
    else:
        keys["module_fqns_per_model_part"] = modules_from_counts(counts, layers)
    return keys, _blocks(counts)


def _wanted_counts(
    run: RunFile, own: tuple[int, ...], layers: int, lost: list[str]
) -> tuple[int, ...]:
    """The run's layers per stage, or torchtitan's own split (named) when the run states an
    objective, nothing, or counts that do not fit."""
    text = run.partition
    if text is None or not text.replace(",", "").isdigit():
        lost.append(
            f"partition {text or '(not stated)'}: torchtitan splits the model by its own rule "
            f"(generate_llm_fqn_per_model_part); its split {list(own)} written"
        )
        return own
    counts = tuple(int(part) for part in text.split(","))
    if len(counts) != len(own) or sum(counts) != layers + 2 or min(counts) < 1:
        lost.append(
            f"partition {text}: not {len(own)} stages of the model's {layers + 2} layers; "
            "torchtitan's split written"
        )
        return own
    return counts


def layers_per_stage_for(layers: int, stages: int) -> int | None:
    """A pipeline_parallel_layers_per_stage that makes ``stages`` stages of ``layers`` blocks
    (the embedding and output weighing one each), or None."""
    for per_stage in range(1, layers + 3):
        if math.ceil((layers + 2) / per_stage) == stages:
            return per_stage
    return None


def _written_recompute(
    run: RunFile,
    blocks: tuple[int, ...] | None,
    parallelism: Mapping[str, Any],
    lost: list[str],
) -> dict[str, str]:
    """[activation_checkpoint] for the run's recompute (always written: torchtitan's default
    is selective every 2nd layer)."""
    recompute = Recompute.parse(run.recompute or "none").label
    if recompute in ("none", "full"):
        return {"mode": recompute}
    if recompute == "selective":
        lost.append(
            "recompute selective (the attention core): torchtitan's nearest is its op policy "
            "(selective_ac_option 'op'), which also re-runs every other matmul"
        )
        return {"mode": "selective", "selective_ac_option": "op"}
    if blocks is not None:
        if int(recompute) >= max(blocks):
            return {"mode": "full"}
        placement = _written_placement(parallelism, len(blocks))
        for every in range(1, sum(blocks) + 1):
            if recompute_of(layer_sac_counts(blocks, placement, every), blocks) == recompute:
                return {"mode": "selective", "selective_ac_option": str(every)}
    lost.append(
        f"recompute {recompute}: no torchtitan selective_ac_option checkpoints {recompute} "
        "blocks of every stage; full written"
    )
    return {"mode": "full"}


def _written_placement(parallelism: Mapping[str, Any], stages: int) -> tuple[tuple[int, ...], ...]:
    """Each rank's stages for the written schedule."""
    pipeline = parallelism.get("pipeline_parallel_degree", 1)
    v_style = parallelism.get("pipeline_parallel_schedule") in V_STYLE
    return stage_placement(pipeline, stages // pipeline, v_style)


def _check_recipe(run: RunFile, lost: list[str]) -> None:
    """Name a recipe, or a change to one, that is not torchtitan's software."""
    if run.recipe not in (None, "torchtitan"):
        lost.append(f"recipe {run.recipe}: a torchtitan file runs torchtitan's software")
    for attribute in (
        "overlap_grad_reduce",
        "attention",
        "blocking_p2p",
        "scatter_gather_p2p",
        "tp_comm_overlap",
    ):
        if getattr(run, attribute) is not None:
            lost.append(f"{attribute} {getattr(run, attribute)}: torchtitan's recipe decides it")
