"""Megatron-LM's launch arguments read into a pipesim :class:`~pipesim.config.run_file.RunFile`,
and a run written as the arguments that launch it.

The option names, defaults and behaviours are NVIDIA/Megatron-LM's, read at three commits:
:data:`SC21_COMMIT` (2021-08-19, ``examples/sc21`` and ``megatron/arguments.py``: the
reproduction scripts of arXiv 2104.04473), :data:`CORE_COMMIT` (2024-12-07,
``megatron/training/arguments.py``, Megatron-Core) and, for the example scripts of today,
:data:`SNAPSHOT_COMMIT`. Every option this module knows is in exactly one of three tables:

* :data:`MAPPED`: read into the run (the architecture, its experts and latent attention, the
  precision and optimizer, the parallel sizes, context and expert parallelism included, and
  the sharding, the batch, the interleaving, the recomputation, the data-parallel and pipeline
  communication); a value pipesim cannot state is refused in one line naming it.
* :data:`REFUSED`: features that change a step's cost in ways pipesim does not model (FP8,
  overlapped parameter gathers, hierarchical context parallelism, the shared experts
  overlapped with the dispatch...), refused in one line naming the option, unless given at the
  value that switches them off (``--num-distributed-optimizer-instances 1``).
* :data:`COST_NEUTRAL`: what changes neither a step's time nor its memory as pipesim models
  them (data and tokenizer paths, logging, the learning-rate schedule, seeds, checkpoints...):
  ignored and listed when ``allow_ignored``, else refused with the hint that ``allow_ignored``
  would list it.

An option in none of them is refused: pipesim cannot tell what it changes. An option left out
takes Megatron-LM's default (``--attention-dropout 0.1``, ``--make-vocab-size-divisible-by
128``, ``--DDP-impl local``...). How Megatron-LM runs the arguments, and so how they are read:

* **World size.** Megatron-LM's arguments hold none: ``torchrun --nnodes --nproc-per-node`` (or
  Slurm's tasks) give it, outside the argument list. So :func:`run_from_megatron_args` takes
  ``world_size``; with it D = world / (T x P x CP) (Megatron's ``validate_args``), and the
  micro-batches per replica M = global batch / (micro-batch x D). Without it nothing is
  inferred: ``data_parallel`` and ``microbatches`` stay unstated and the command line says
  what is missing.
* **Vocabulary.** Megatron pads the tokenizer's vocabulary to a multiple of
  ``--make-vocab-size-divisible-by`` x T (``_vocab_size_with_padding``). ``pretrain_gpt.py``
  defaults to ``GPT2BPETokenizer``, GPT-2's 50,257 tokens: 50,304 at T = 1, 51,200 at T = 8
  (the 51,200 of arXiv 2104.04473 and of the catalogue's ``megatron-*`` models, whose Table 1
  counts every size with it; the sc21 script's T = 1 rows train 50,304). ``NullTokenizer``
  has ``--vocab-size`` + 1 tokens (its end-of-document token, until c9dfe34 of 2026-04-22).
  A tokenizer that reads its vocabulary from a file pipesim does not read is refused.
* **The recipe** (the software's choices, :mod:`pipesim.config.recipes`): the ``recipe``
  keyword when given, else the era the options show. Each option added to Megatron-LM after
  :data:`SC21_COMMIT` carries the date it reached main (:data:`SINCE`); the newest of them
  decides: before 2022-02-22 (fused gradient accumulation on by default, the first choice the
  2021 recipe does not share) ``megatron-lm-2021``, before 2023-01-11 (``--use-flash-attn``)
  ``megatron-lm-2022``, later ``megatron-core-2024``. A line of sc21's options alone is
  ``megatron-lm-2021``. A line mixing an option Megatron removed (:data:`UNTIL`) with one added
  after the removal runs on no Megatron-LM and is refused.
* **The model** is stated inline, built from the architecture options as the catalogue builds
  Megatron's GPT models (:func:`pipesim.workload.catalogue.megatron_gpt`): learned positions,
  tied embeddings, biases, dropout, LayerNorm and GELU unless the options say otherwise; fp16
  or bf16 weights, fp32 master weights and Adam state, apex's or Transformer Engine's fused
  Adam (no step temporaries); gradients in fp16 (fp32 under bf16 or
  ``--accumulate-allreduce-grads-in-fp32``, bf16 under ``--grad-reduce-in-bf16``). Its
  attention is the architecture's default (eager): the kernel is the recipe's, and options
  that choose another (``--use-flash-attn``, ``--attention-backend``, ``--transformer-impl``)
  state the run's ``attention``. Its default batch is the global batch.
* **The layout.** Megatron-LM runs 1F1B (``forward_backward_pipelining_without_interleaving``;
  with one stage, the same order without messages) or, with
  ``--num-layers-per-virtual-pipeline-stage N``, interleaved 1F1B on v = layers / (P x N)
  chunks. The partition is always stated: N (or layers / P) transformer blocks a stage, the
  embedding with the first and the output layer with the last (pipesim counts them as layers
  of their own), or ``--decoder-first/last-pipeline-num-layers`` without interleaving.
* **Recomputation.** ``--recompute-activations`` (or ``--recompute-granularity selective``)
  is pipesim's selective; full recomputation with the uniform method one layer a unit (sc21's
  ``--activations-checkpoint-method uniform``, ``--checkpoint-activations``) is pipesim's full;
  the block method with N layers is pipesim's N. Uniform units of several layers stash one
  input per unit, which pipesim's recomputation cannot state: refused.
* **Communication.** ``--overlap-grad-reduce``, or PyTorch's DDP (``--DDP-impl torch``), is
  the run's ``overlap_grad_reduce``. Megatron-Core of 2024 overlaps the interleaved schedule's
  messages unless ``--no-overlap-p2p-communication`` (and never 1F1B's): stated as
  ``blocking_p2p = false``. ``--sequence-parallel`` is read for T > 1 only: Megatron turns it
  off at T = 1. ``--no-scatter-gather-tensors-in-pipeline`` is ``scatter_gather_p2p = false``
  under the recipes that scatter (``megatron-lm-2021``, ``-2022``); Megatron-Core keeps the
  option but reads it nowhere, so there it is ignored, with the reason. ``--tp-comm-overlap``
  is ``tp_comm_overlap = true``; Megatron asserts ``--sequence-parallel`` beside it (refused
  without), and only Transformer Engine's layers read it (ignored with ``--transformer-impl
  local``).
* **Context and expert parallelism** (Megatron-Core's alone: its legacy models refuse or lack
  them). ``--context-parallel-size`` is CP, ``--cp-comm-type`` the exchange as Transformer
  Engine names it: ``p2p`` (the default, pipesim's ring) or ``all_gather`` (pipesim's
  ``all-gather``); ``a2a`` and ``a2a+p2p`` (DeepSpeed-Ulysses' all-to-alls, alone or in a
  hierarchy) are refused, and so is ``allgather``, the spelling of Megatron's help text that
  Transformer Engine raises on; a type per layer is refused unless all are one. Megatron's
  asserts are reproduced: Transformer Engine's attention only (not ``--transformer-impl
  local``), the sequence a multiple of 2 x CP. ``--expert-model-parallel-size`` is EP, with
  Megatron's asserts (``--num-experts`` given, a multiple of EP; the expert groups of
  parallel_state whole: ETP x EP x P dividing the world, at ETP = T EP dividing D x CP);
  ``--expert-tensor-parallel-size`` is ETP (``expert_tensor_parallel``, stated where it is not
  T, Megatron's default), with Megatron's checks: each expert's width divisible by it (its
  ``divide``), sequence parallelism beside T > 1 (MoELayer raises without it in training),
  the ``alltoall`` dispatcher where ETP x EP > 1. The token dispatcher
  (``--moe-token-dispatcher-type``, default ``allgather``): pipesim's expert parallelism is the
  ``alltoall`` dispatcher's all-to-alls, so ``allgather`` (every token gathered on the T x EP
  ranks) is read without EP only, where it is the gather over the T ranks pipesim's MoE block
  runs; ``flex`` (DeepEP's and HybridEP's kernels) and ``alltoall_seq`` beside T or EP are
  refused. Megatron's assert of EP against fp16 (afd970a, 2023-11-17, to 4193f3a, 2025-12-22)
  is not reproduced: today's Megatron-LM has none.
* **Mixture of experts and latent attention** (Megatron-Core's; the legacy models' SwitchMLP,
  top-1 from 53f3efc, is refused). ``--num-experts`` E (0: dense), ``--moe-router-topk`` k
  (default 2), ``--moe-ffn-hidden-size`` (default ``--ffn-hidden-size``), gated as the dense
  MLP (``--swiglu``); ``--moe-shared-expert-intermediate-size`` S, one MLP in Megatron, read as
  S / f_e shared experts where f_e divides S (DeepSeek's 2 x 1408), else one of S, the same
  width pipesim costs; ``--moe-layer-freq`` N (block i an MoE block when i % N == 0) or its
  list form (lists of 0s and 1s joined by + and *, read without eval: ``([0]*1+[1]*26)``)
  when it is N's pattern after some leading dense blocks; ``--moe-router-load-balancing-type``
  one of aux_loss, seq_aux_loss, sinkhorn, none; ``--moe-expert-capacity-factor`` (negative:
  dropless; refused beside Sinkhorn, as Megatron-Core refuses it);
  ``--moe-router-enable-expert-bias`` (Megatron asserts a sigmoid score function beside it).
  The auxiliary losses' coefficients, ``--moe-grouped-gemm`` (grouped or looped, the same
  matmuls as pipesim costs them) and the router's numerics are cost-neutral.
  ``--multi-latent-attention`` with its five sizes (Megatron's defaults: no query latent, kv
  rank 32, 128, 64, 128) is the model's ``mla``; Megatron norms the latents only with
  ``--qk-layernorm``, which pipesim's latent attention (DeepSeek's) always does, so it is
  refused without. Both need ``--disable-bias-linear`` (pipesim's experts and latent
  projections have no biases). ``--kv-channels`` is the heads' width where it is not hidden /
  heads (Qwen3's), and ``--qk-layernorm`` without latent attention is ``qk_norm``.
* **Sharded data parallelism** (:mod:`pipesim.parallel.sharding`).
  ``--use-distributed-optimizer`` is ZeRO-1. Megatron-FSDP (``--use-megatron-fsdp``, 4dd2f2b,
  2025-08-21; before it ``--use-custom-fsdp``, 892c4c8, 2025-02-26) is the ZeRO stage its
  ``--data-parallel-sharding-strategy`` names: ``no_shard`` 0, ``optim`` 1, ``optim_grads``
  2, ``optim_grads_params`` 3 (the distributed optimizer beside it is its own). The
  strategy's default was ``no_shard`` until 3499efe (2026-04-01), ``optim_grads_params``
  since: a line that gives none is read by its date, refused when nothing dates it.
  Megatron-FSDP's ZeRO-2/3 reduce-scatters every micro-batch's gradients, in a pipeline too,
  which pipesim's pipelined ZeRO-2/3 (PyTorch's: gradients held until the step's last
  backward) cannot state: refused with P > 1. ``--use-torch-fsdp2`` is ZeRO-3
  (``--torch-fsdp2-no-reshard-after-forward``: ``reshard_after_forward = never``). Megatron's
  own asserts are reproduced: FSDP2 refuses pipeline parallelism, the distributed optimizer,
  fused gradient accumulation (so only a named unfused recipe, ``megatron-lm-2021``, reads
  it), tied embeddings and fp16; ``--use-custom-fsdp`` needs the distributed optimizer and,
  for ``optim_grads*``, unfused accumulation; ``--use-megatron-fsdp`` needs ``--ckpt-format
  fsdp_dtensor`` (without FSDP the format is a checkpoint's, ignored).

A choice equal to the recipe's is not stated (``overlap_grad_reduce`` false, the recipe's
attention), so a run read back from :func:`megatron_args` equals the run written.

:func:`megatron_args` writes a plan's run back as the arguments of the Megatron-LM its recipe
names (sc21's option names for ``megatron-lm-2021``) and names, never drops, what that
Megatron-LM cannot express of it: schedules other than 1F1B and interleaved 1F1B, a partition
other than Megatron's, options its era lacks (``--sequence-parallel`` in 2021), pipesim's own
settings (``steps``, ``remat``...). ZeRO-2/3 is written as Megatron-FSDP, as Megatron's
examples/megatron_fsdp give it: ``--use-distributed-optimizer --use-megatron-fsdp
--data-parallel-sharding-strategy optim_grads`` (or ``optim_grads_params``) ``--ckpt-format
fsdp_dtensor``, options that date the line to Megatron-Core. Context and expert parallelism
are ``--context-parallel-size`` (with ``--cp-comm-type all_gather`` for ``all-gather``) and
``--expert-model-parallel-size``; a model's experts and latent attention are Megatron-Core's
options above, with the ``alltoall`` dispatcher. A run of an older recipe that needs
Megatron-Core (ZeRO-2/3, context parallelism, experts, latent attention) is written as
Megatron-Core's arguments, its recipe's choices stated where Megatron-Core has options for
them (eager attention: ``--attention-backend unfused``), the rest named. It writes
the arguments that change the cost; data paths, tokenizer files and the learning rate are the
user's to add.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from pipesim.common.checks import SpecError
from pipesim.common.limits import Limit, check
from pipesim.config.recipe import Recipe
from pipesim.config.recipes import RECIPES
from pipesim.config.run_file import RunFile
from pipesim.errors import few, named, shown
from pipesim.parallel.config import Recompute, RecomputeMode
from pipesim.parallel.sharding import ReshardPolicy
from pipesim.workload.architecture import Attention, Mlp, Norm, Position, TransformerArchitecture
from pipesim.workload.catalogue import from_architecture
from pipesim.workload.model import Model
from pipesim.workload.moe import LoadBalancing, MixtureOfExperts, MultiLatentAttention
from pipesim.workload.optimizer import with_optimizer

# ---------------------------------------------------------------------------------------------
# Sources: NVIDIA/Megatron-LM

# examples/sc21 (run_table_1.sh, CONFIG.sh, SBATCH.sh, SRUN.sh) and megatron/arguments.py.
SC21_COMMIT = "6985e58938d40ad91ac07b0fddcfad8132e1447e"
# megatron/training/arguments.py of Megatron-Core, 2024-12-07 (the recipes' 9dc7fef).
CORE_COMMIT = "9dc7fefa229ad89f58e01aaaa15fb270e382d571"
# The snapshot read for today's examples (examples/gpt3, examples/llama), 2026-08-22.
SNAPSHOT_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
_SC21 = f"megatron/arguments.py at {SC21_COMMIT[:7]}"
_CORE = f"megatron/training/arguments.py at {CORE_COMMIT[:7]}"

# GPT-2's BPE vocabulary: _GPT2BPETokenizer.vocab_size is len(encoder) of gpt2-vocab.json,
# 50,257 tokens (megatron/training/tokenizer/tokenizer.py at 9dc7fef; OpenAI's GPT-2
# encoder.json; examples/rl/benchmark_refit.py at the snapshot: "default vocab_size=50257").
GPT2_VOCAB = 50257
# pretrain_gpt.py's args_defaults={'tokenizer_type': 'GPT2BPETokenizer'} (6985e58 line 125,
# 9dc7fef line 289).
DEFAULT_TOKENIZER = "GPT2BPETokenizer"
# --make-vocab-size-divisible-by's default, 128 (both commits' _add_network_size_args).
DEFAULT_VOCAB_MULTIPLE = 128
# --attention-dropout and --hidden-dropout default 0.1 (both commits' regularization args).
DEFAULT_DROPOUT = 0.1

MEGATRON_RECIPES = ("megatron-lm-2021", "megatron-lm-2022", "megatron-core-2024")
# Each recipe's era: options that reached Megatron-LM's main branch from the first date until
# (not on) the second. 2022-02-22: 9c5a830, gradient-accumulation fusion on by default (the
# 2022 recipe's first difference); 2023-01-11: 285068c, --use-flash-attn merged (the 2022
# recipe's attention "came after").
ERAS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "megatron-lm-2021": ("0000-00-00", "2022-02-22"),
        "megatron-lm-2022": ("2022-02-22", "2023-01-11"),
        "megatron-core-2024": ("2023-01-11", "9999-99-99"),
    }
)


# ---------------------------------------------------------------------------------------------
# The three tables


class Takes(Enum):
    """The values an option takes on the command line (argparse's ``store_true``, ``type=int``,
    ``type=float``, ``choices``, ``type=str``)."""

    FLAG = "no value"
    INT = "an integer"
    FLOAT = "a number"
    WORD = "one word"
    WORDS = "one or more words"


@dataclass(frozen=True)
class Mapped:
    """An option read into the run: the values it takes, and what it sets in pipesim."""

    takes: Takes
    sets: str
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refused:
    """A feature pipesim does not model: the values that switch it off (accepted), and why any
    other use is refused."""

    why: str
    inert: tuple[str, ...] = ()


_F, _I, _N, _W, _WS = Takes.FLAG, Takes.INT, Takes.FLOAT, Takes.WORD, Takes.WORDS

# Megatron-FSDP's --data-parallel-sharding-strategy and the ZeRO stage of each: the buffers it
# distributes over the data-parallel ranks (_init_each_parameter_group_buffers in
# megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py at the snapshot):
# none; the main (fp32) weights and so the optimizer state; the gradients too; the weights too.
SHARDING_STRATEGIES: Mapping[str, int] = MappingProxyType(
    {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
)

MAPPED: Mapping[str, Mapped] = MappingProxyType(
    {
        # the architecture
        "--num-layers": Mapped(_I, "the model's layers"),
        "--hidden-size": Mapped(_I, "the model's hidden width"),
        "--num-attention-heads": Mapped(_I, "the model's heads"),
        "--ffn-hidden-size": Mapped(_I, "the MLP's width (default 4h; swiglu's 8h/3 in 64s)"),
        "--kv-channels": Mapped(_I, "head_dim where it is not hidden / heads"),
        "--qk-layernorm": Mapped(_F, "qk_norm (with latent attention: its latents' norms)"),
        "--group-query-attention": Mapped(_F, "kv_heads = --num-query-groups"),
        "--num-query-groups": Mapped(_I, "kv_heads (with --group-query-attention)"),
        "--seq-length": Mapped(_I, "the model's seq"),
        "--max-position-embeddings": Mapped(_I, "checked: >= seq; = seq for learned positions"),
        "--make-vocab-size-divisible-by": Mapped(_I, "the vocabulary's padding (x T)"),
        "--vocab-size": Mapped(_I, "NullTokenizer's vocabulary (+1 end-of-document)"),
        "--tokenizer-type": Mapped(_W, "the vocabulary before padding"),
        "--swiglu": Mapped(_F, "mlp = swiglu"),
        "--normalization": Mapped(_W, "norm", ("LayerNorm", "RMSNorm")),
        "--position-embedding-type": Mapped(_W, "position", ("learned_absolute", "rope", "none")),
        "--use-rotary-position-embeddings": Mapped(_F, "position = rope (its older name)"),
        "--untie-embeddings-and-output-weights": Mapped(_F, "tied_embeddings = false"),
        "--disable-bias-linear": Mapped(_F, "linear_bias = false"),
        "--attention-dropout": Mapped(_N, "dropout (0 with --hidden-dropout 0: none)"),
        "--hidden-dropout": Mapped(_N, "dropout and embedding_dropout"),
        "--use-flash-attn": Mapped(_F, "attention = flash"),
        "--attention-backend": Mapped(
            _W, "attention", ("flash", "fused", "unfused", "local", "auto")
        ),
        "--transformer-impl": Mapped(_W, "attention's default", ("local", "transformer_engine")),
        "--use-mcore-models": Mapped(
            _F,
            "the recipe megatron-core-2024 (Megatron-Core's models: the option chose them from "
            "2023-10-10, bd609d2, and dates the line to that era; ignored by Megatron-LM since "
            "Megatron-Core became the default)",
        ),
        # precision and optimizer
        "--fp16": Mapped(_F, "the model's dtype fp16"),
        "--bf16": Mapped(_F, "the model's dtype bf16, fp32 gradients"),
        "--accumulate-allreduce-grads-in-fp32": Mapped(_F, "fp32 gradients"),
        "--grad-reduce-in-bf16": Mapped(_F, "bf16 gradients under --bf16"),
        "--optimizer": Mapped(_W, "the optimizer's state", ("adam", "sgd")),
        "--sgd-momentum": Mapped(_N, "sgd's state: a momentum buffer unless 0"),
        # parallel sizes and batch
        "--tensor-model-parallel-size": Mapped(_I, "tensor_parallel (T)"),
        "--pipeline-model-parallel-size": Mapped(_I, "pipeline_parallel (P)"),
        "--num-layers-per-virtual-pipeline-stage": Mapped(
            _I, "schedule interleaved-1f1b, chunks = layers / (P x N)"
        ),
        "--decoder-first-pipeline-num-layers": Mapped(_I, "partition: the first stage's blocks"),
        "--decoder-last-pipeline-num-layers": Mapped(_I, "partition: the last stage's blocks"),
        "--micro-batch-size": Mapped(_I, "microbatch_size"),
        "--global-batch-size": Mapped(_I, "batch; microbatches = global / (micro x D)"),
        "--sequence-parallel": Mapped(_F, "sequence_parallel (T > 1)"),
        "--use-distributed-optimizer": Mapped(
            _F, "zero = 1 (beside Megatron-FSDP, its optimizer: the strategy decides)"
        ),
        "--use-megatron-fsdp": Mapped(_F, "zero as --data-parallel-sharding-strategy (P = 1)"),
        "--use-custom-fsdp": Mapped(_F, "--use-megatron-fsdp's name until 4dd2f2b"),
        "--data-parallel-sharding-strategy": Mapped(
            _W,
            "zero: no_shard 0, optim 1, optim_grads 2, optim_grads_params 3 (Megatron-FSDP)",
            tuple(SHARDING_STRATEGIES),
        ),
        "--use-torch-fsdp2": Mapped(_F, "zero = 3 (PyTorch FSDP2; Megatron asserts P = 1)"),
        "--torch-fsdp2-no-reshard-after-forward": Mapped(
            _F, "reshard_after_forward = never (with --use-torch-fsdp2)"
        ),
        "--ckpt-format": Mapped(
            _W,
            "checked: fsdp_dtensor with Megatron-FSDP, torch_dist or torch_dcp with FSDP2 "
            "(Megatron asserts them); otherwise ignored (a checkpoint's format)",
        ),
        "--overlap-grad-reduce": Mapped(_F, "overlap_grad_reduce"),
        "--DDP-impl": Mapped(_W, "overlap_grad_reduce (torch)", ("local", "torch")),
        "--overlap-p2p-communication": Mapped(_F, "blocking_p2p = false (interleaved)"),
        "--no-overlap-p2p-communication": Mapped(_F, "the recipe's blocking messages"),
        "--no-gradient-accumulation-fusion": Mapped(_F, "checked against the recipe"),
        "--no-scatter-gather-tensors-in-pipeline": Mapped(
            _F, "scatter_gather_p2p = false (before Megatron-Core)"
        ),
        "--tp-comm-overlap": Mapped(_F, "tp_comm_overlap (with --sequence-parallel)"),
        # recomputation
        "--checkpoint-activations": Mapped(_F, "recompute full"),
        "--activations-checkpoint-method": Mapped(_W, "recompute", ("uniform", "block")),
        "--activations-checkpoint-num-layers": Mapped(_I, "recompute (block: N)"),
        "--recompute-activations": Mapped(_F, "recompute selective"),
        "--recompute-granularity": Mapped(_W, "recompute", ("full", "selective")),
        "--recompute-method": Mapped(_W, "recompute", ("uniform", "block")),
        "--recompute-num-layers": Mapped(_I, "recompute (block: N)"),
        # context and expert parallelism
        "--context-parallel-size": Mapped(_I, "context_parallel (CP); D = world / (T x P x CP)"),
        "--cp-comm-type": Mapped(_WS, "cp_comm_type: p2p, all_gather (one for every layer)"),
        "--expert-model-parallel-size": Mapped(_I, "expert_parallel (EP)"),
        "--expert-tensor-parallel-size": Mapped(
            _I, "expert_tensor_parallel (ETP, default T: each routed expert split ETP ways)"
        ),
        # mixture of experts (Megatron-Core's)
        "--num-experts": Mapped(_I, "moe.experts (0: a dense model)"),
        "--moe-router-topk": Mapped(_I, "moe.top_k (default 2)"),
        "--moe-ffn-hidden-size": Mapped(_I, "moe.expert_ffn (default --ffn-hidden-size)"),
        "--moe-shared-expert-intermediate-size": Mapped(
            _I, "the shared experts' width together: moe.shared_experts x shared_expert_ffn"
        ),
        "--moe-layer-freq": Mapped(
            _W, "moe.layer_frequency (N), or first_dense_layers too (a list of 0s and 1s)"
        ),
        "--moe-router-load-balancing-type": Mapped(
            _WS,
            "moe.load_balancing (one type)",
            (
                "aux_loss",
                "seq_aux_loss",
                "global_aux_loss",
                "sinkhorn",
                "quantile_balancing",
                "none",
            ),
        ),
        "--moe-expert-capacity-factor": Mapped(_N, "moe.capacity_factor (negative: dropless)"),
        "--moe-pad-expert-input-to-capacity": Mapped(_F, "moe.pad_to_capacity"),
        "--cpu-offloading-num-layers": Mapped(_I, "offload_activations"),
        "--moe-token-dispatcher-type": Mapped(
            _W,
            "checked: alltoall (EP's all-to-alls); allgather without EP",
            ("allgather", "alltoall", "alltoall_seq", "flex"),
        ),
        "--moe-router-enable-expert-bias": Mapped(_F, "moe.expert_bias"),
        "--moe-router-score-function": Mapped(
            _W,
            "checked: sigmoid or sqrtsoftplus beside --moe-router-enable-expert-bias (the "
            "router's scores: no matmul)",
            ("softmax", "sigmoid", "sqrtsoftplus"),
        ),
        # multi-head latent attention (Megatron-Core's)
        "--multi-latent-attention": Mapped(_F, "mla (with --qk-layernorm: its latents' norms)"),
        "--q-lora-rank": Mapped(_I, "mla.q_lora_rank (default none)"),
        "--kv-lora-rank": Mapped(_I, "mla.kv_lora_rank (default 32)"),
        "--qk-head-dim": Mapped(_I, "mla.qk_nope_head_dim (default 128)"),
        "--qk-pos-emb-head-dim": Mapped(_I, "mla.qk_rope_head_dim (default 64)"),
        "--v-head-dim": Mapped(_I, "mla.v_head_dim (default 128)"),
    }
)

REFUSED: Mapping[str, Refused] = MappingProxyType(
    {
        "--hierarchical-context-parallel-sizes": Refused(
            "hierarchical context parallelism (a2a+p2p: all-to-alls inside groups, a ring "
            "between them) is not modelled"
        ),
        "--moe-extended-tp": Refused(
            "extended tensor parallelism of the experts (over T x EP ranks) is not modelled"
        ),
        "--moe-shared-expert-overlap": Refused(
            "the shared experts overlapped with the token dispatch: pipesim runs them in turn"
        ),
        "--moe-layer-recompute": Refused(
            "recomputing the mixture-of-experts layers alone is not modelled"
        ),
        "--pipeline-model-parallel-split-rank": Refused(
            "an encoder-decoder split of the pipeline is not modelled (decoder-only models)"
        ),
        "--encoder-pipeline-model-parallel-size": Refused(
            "encoder pipeline stages are not modelled (decoder-only models)", ("0",)
        ),
        "--encoder-tensor-model-parallel-size": Refused(
            "an encoder's tensor parallelism is not modelled (decoder-only models)", ("0",)
        ),
        "--add-qkv-bias": Refused(
            "biases on the query, key and value projections alone: pipesim's linear_bias is "
            "every projection or none"
        ),
        "--fp32-residual-connection": Refused(
            "an fp32 residual stream: pipesim's activations have one element size"
        ),
        "--fp8-format": Refused("FP8 training (Transformer Engine's casts) is not modelled"),
        "--fp8-param-gather": Refused("FP8 parameters are not modelled"),
        "--fp8-amax-history-len": Refused("FP8 training is not modelled"),
        "--fp8-amax-compute-algo": Refused("FP8 training is not modelled"),
        "--fp8-margin": Refused("FP8 training is not modelled"),
        "--overlap-param-gather": Refused(
            "the distributed optimizer's parameter all-gather overlapped with the next "
            "forward: pipesim times it after the optimizer step, exposed"
        ),
        "--distribute-saved-activations": Refused(
            "recomputed inputs split over the tensor-parallel group: pipesim stashes them whole"
        ),
        "--distribute-checkpointed-activations": Refused(
            "recomputed inputs split over the tensor-parallel group: pipesim stashes them whole"
        ),
        "--cross-entropy-loss-fusion": Refused(
            "a fused cross entropy: pipesim costs PyTorch's over fp32 logits (the output "
            "layer's memory and traffic, pipesim/workload/transformer.py)"
        ),
        "--fp16-lm-cross-entropy": Refused(
            "the loss on fp16 logits: pipesim costs the cross entropy over fp32 logits"
        ),
        "--microbatch-group-size-per-virtual-pipeline-stage": Refused(
            "another grouping of the interleaved schedule's micro-batches: pipesim's "
            "interleaved-1f1b groups P, Megatron's default"
        ),
        "--defer-embedding-wgrad-compute": Refused(
            "the output layer's weight gradient deferred to the flush is not modelled"
        ),
        "--num-distributed-optimizer-instances": Refused(
            "a partially sharded optimizer is not modelled (ZeRO-1 shards over all D)", ("1",)
        ),
    }
)

_DATA = "the training data's source and loading: pipesim takes the input as ready"
_TOKENIZER_FILE = "a tokenizer file's path: the vocabulary's size comes from --tokenizer-type"
_LR = "the learning rate's value, not a step's work"
_OPTIMIZER_VALUE = "an optimizer hyper-parameter, not its work or memory"
_LENGTH = "how long training runs, not what a step costs"
_CHECKPOINT = "checkpoints are saved and loaded between steps"
_EVAL = "evaluation runs between training steps"
_LOGGING = "logging and profiling only"
_NUMERICS = "numerics of the same kernels (same work, same memory)"
_LOSS_SCALE = "fp16 loss scaling: a scalar per step"

COST_NEUTRAL: Mapping[str, str] = MappingProxyType(
    {
        **dict.fromkeys(
            (
                "--data-path",
                "--split",
                "--data-impl",
                "--data-cache-path",
                "--mock-data",
                "--num-workers",
                "--no-mmap-bin-files",
                "--no-create-attention-mask-in-dataloader",
                "--dataloader-type",
                "--reset-position-ids",
                "--reset-attention-mask",
                "--eod-mask-loss",
                "--mmap-warmup",
            ),
            _DATA,
        ),
        **dict.fromkeys(
            ("--vocab-file", "--merge-file", "--tokenizer-model", "--tiktoken-pattern"),
            _TOKENIZER_FILE,
        ),
        **dict.fromkeys(
            (
                "--lr",
                "--min-lr",
                "--lr-decay-style",
                "--lr-decay-iters",
                "--lr-decay-samples",
                "--lr-warmup-fraction",
                "--lr-warmup-iters",
                "--lr-warmup-samples",
                "--decoupled-lr",
                "--decoupled-min-lr",
                "--override-lr-scheduler",
                "--use-checkpoint-lr-scheduler",
            ),
            _LR,
        ),
        **dict.fromkeys(
            ("--weight-decay", "--adam-beta1", "--adam-beta2", "--adam-eps", "--clip-grad"),
            _OPTIMIZER_VALUE,
        ),
        **dict.fromkeys(
            (
                "--train-iters",
                "--train-samples",
                "--exit-interval",
                "--exit-duration-in-mins",
            ),
            _LENGTH,
        ),
        **dict.fromkeys(
            (
                "--save",
                "--load",
                "--save-interval",
                "--no-save-optim",
                "--no-save-rng",
                "--no-load-optim",
                "--no-load-rng",
                "--finetune",
            ),
            _CHECKPOINT,
        ),
        **dict.fromkeys(("--eval-iters", "--eval-interval"), _EVAL),
        **dict.fromkeys(
            (
                "--log-interval",
                "--tensorboard-dir",
                "--tensorboard-log-interval",
                "--log-throughput",
                "--log-params-norm",
                "--log-num-zeros-in-grad",
                "--profile",
                "--profile-step-start",
                "--profile-step-end",
                "--wandb-project",
                "--wandb-exp-name",
            ),
            _LOGGING,
        ),
        **dict.fromkeys(
            (
                "--init-method-std",
                "--seed",
                "--norm-epsilon",
                "--layernorm-epsilon",
                "--apply-layernorm-1p",
                "--apply-residual-connection-post-layernorm",
                "--openai-gelu",
                "--no-query-key-layer-scaling",
                "--calculate-per-token-loss",
            ),
            _NUMERICS,
        ),
        **dict.fromkeys(
            (
                "--loss-scale",
                "--initial-loss-scale",
                "--min-loss-scale",
                "--loss-scale-window",
                "--hysteresis",
            ),
            _LOSS_SCALE,
        ),
        "--rotary-base": "rotary positions' frequencies: pipesim's rotation costs nothing",
        "--rotary-percent": "rotary positions' share of the head: pipesim's rotation costs nothing",
        "--distributed-timeout-minutes": "a timeout, not a step's work",
        "--distributed-backend": "the process group's backend name (NCCL's collectives are "
        "the hardware spec's)",
        "--manual-gc": "Python's garbage collection between steps",
        "--empty-unused-memory-level": "torch.cuda.empty_cache() between steps",
        "--rampup-batch-size": "the batch's ramp during the first samples: pipesim simulates "
        "the step at --global-batch-size, after the ramp",
        "--step-batch-size-schedule": "the batch's schedule during the first tokens (532ad92, "
        "2026-04-21): pipesim simulates the step at --global-batch-size, after it",
        **dict.fromkeys(
            (
                "--moe-aux-loss-coeff",
                "--moe-z-loss-coeff",
                "--moe-input-jitter-eps",
                "--moe-router-pre-softmax",
                "--moe-router-topk-scaling-factor",
                "--moe-router-bias-update-rate",
            ),
            "the router's numerics and auxiliary losses: no matmul, the same routed tokens",
        ),
        "--moe-grouped-gemm": "the experts' GEMMs in one grouped kernel or a loop: pipesim "
        "costs them alike (E matmuls of k·s/E rows each)",
        "--moe-token-drop-policy": "which tokens a capacity drops: pipesim drops none",
        "--moe-per-layer-logging": _LOGGING,
        "--moe-use-upcycling": "a dense checkpoint converted to experts when loaded",
    }
)

# The date each option reached Megatron-LM's main branch, for those added after SC21_COMMIT:
# the first commit of `git log --first-parent -S"'--option'"` on megatron/arguments.py and
# megatron/training/arguments.py (committer date). Options not listed existed at SC21_COMMIT.
SINCE: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "--no-gradient-accumulation-fusion": ("2022-02-22", "9c5a830"),
        "--num-experts": ("2022-02-24", "53f3efc"),
        "--sequence-parallel": ("2022-05-20", "9aad920"),
        "--recompute-activations": ("2022-05-20", "9aad920"),
        "--recompute-granularity": ("2022-05-20", "9aad920"),
        "--recompute-method": ("2022-05-20", "9aad920"),
        "--recompute-num-layers": ("2022-05-20", "9aad920"),
        "--distribute-saved-activations": ("2022-05-20", "9aad920"),
        "--use-distributed-optimizer": ("2022-06-08", "d07d29d"),
        "--transformer-impl": ("2022-12-21", "e1c334b"),
        "--fp8-amax-history-len": ("2022-12-21", "e1c334b"),
        "--fp8-amax-compute-algo": ("2022-12-21", "e1c334b"),
        "--use-flash-attn": ("2023-01-11", "285068c"),
        "--distributed-timeout-minutes": ("2023-02-21", "762072e"),
        "--swiglu": ("2023-04-05", "f6d36d0"),
        "--disable-bias-linear": ("2023-04-05", "f6d36d0"),
        "--use-rotary-position-embeddings": ("2023-04-05", "7bd25e2"),
        "--rotary-percent": ("2023-04-05", "7bd25e2"),
        "--apply-layernorm-1p": ("2023-04-05", "4e891fe"),
        "--untie-embeddings-and-output-weights": ("2023-04-06", "018391a"),
        "--vocab-size": ("2023-04-28", "193c43f"),
        "--overlap-p2p-communication": ("2023-05-31", "e6d7e09"),
        "--data-cache-path": ("2023-05-31", "e4adfbc"),
        "--position-embedding-type": ("2023-07-06", "1707dd5"),
        "--profile": ("2023-07-07", "c8bc167"),
        "--profile-step-start": ("2023-07-07", "c8bc167"),
        "--profile-step-end": ("2023-07-07", "c8bc167"),
        "--group-query-attention": ("2023-07-21", "bc777f6"),
        "--num-query-groups": ("2023-07-21", "bc777f6"),
        "--normalization": ("2023-08-02", "0ff88d5"),
        "--fp8-format": ("2023-08-24", "84f6488"),
        "--overlap-grad-reduce": ("2023-09-07", "e801b2b"),
        "--norm-epsilon": ("2023-09-08", "5385e53"),
        "--use-mcore-models": ("2023-10-10", "bd609d2"),
        "--expert-model-parallel-size": ("2023-10-10", "370f3c1"),
        "--no-overlap-p2p-communication": ("2023-10-24", "3f554d9"),
        "--context-parallel-size": ("2023-10-30", "4a6255a"),
        "--tp-comm-overlap": ("2023-10-30", "a2d3852"),
        "--manual-gc": ("2023-10-30", "739539c"),
        "--overlap-param-gather": ("2023-11-17", "3b41726"),
        "--log-throughput": ("2023-11-28", "bcce6f5"),
        "--moe-grouped-gemm": ("2024-01-11", "2fd2882"),
        "--moe-router-topk": ("2024-01-25", "559e82c"),
        "--moe-router-load-balancing-type": ("2024-01-25", "559e82c"),
        "--moe-aux-loss-coeff": ("2024-01-25", "559e82c"),
        "--moe-z-loss-coeff": ("2024-01-25", "559e82c"),
        "--moe-input-jitter-eps": ("2024-01-25", "559e82c"),
        "--mock-data": ("2024-01-26", "803a018"),
        "--add-qkv-bias": ("2024-02-06", "02d284d"),
        "--no-mmap-bin-files": ("2024-03-07", "7e84879"),
        "--qk-layernorm": ("2024-03-22", "24540c1"),
        "--no-create-attention-mask-in-dataloader": ("2024-03-26", "9de386d"),
        "--decoupled-lr": ("2024-03-27", "7b9ba21"),
        "--decoupled-min-lr": ("2024-03-27", "7b9ba21"),
        "--moe-token-dispatcher-type": ("2024-03-27", "f94232d"),
        "--moe-per-layer-logging": ("2024-04-02", "699113a"),
        "--moe-layer-recompute": ("2024-05-01", "30d08d8"),
        "--moe-extended-tp": ("2024-05-01", "30d08d8"),
        "--moe-expert-capacity-factor": ("2024-05-02", "dd398e2"),
        "--moe-pad-expert-input-to-capacity": ("2024-05-02", "dd398e2"),
        "--moe-token-drop-policy": ("2024-05-02", "dd398e2"),
        "--calculate-per-token-loss": ("2024-05-10", "f5f3be5"),
        "--cross-entropy-loss-fusion": ("2024-06-14", "f07647f"),
        "--rotary-base": ("2024-06-28", "3da17a3"),
        "--defer-embedding-wgrad-compute": ("2024-07-05", "67adc31"),
        "--tiktoken-pattern": ("2024-07-05", "0cc3d96"),
        "--moe-router-pre-softmax": ("2024-07-25", "2e6b756"),
        "--encoder-pipeline-model-parallel-size": ("2024-07-14", "3dac44c"),
        "--ckpt-format": ("2024-08-02", "3fd0c44"),
        "--encoder-tensor-model-parallel-size": ("2024-08-05", "2fd6e2b"),
        "--decoder-first-pipeline-num-layers": ("2024-09-05", "60d03fd"),
        "--decoder-last-pipeline-num-layers": ("2024-09-05", "60d03fd"),
        "--fp8-param-gather": ("2024-09-05", "01945b9"),
        "--moe-use-upcycling": ("2024-09-06", "f5667db"),
        "--moe-shared-expert-intermediate-size": ("2024-09-11", "fec11a7"),
        "--moe-shared-expert-overlap": ("2024-09-11", "fec11a7"),
        "--multi-latent-attention": ("2024-09-24", "dcf9e77"),
        "--q-lora-rank": ("2024-09-24", "dcf9e77"),
        "--kv-lora-rank": ("2024-09-24", "dcf9e77"),
        "--qk-head-dim": ("2024-09-24", "dcf9e77"),
        "--qk-pos-emb-head-dim": ("2024-09-24", "dcf9e77"),
        "--v-head-dim": ("2024-09-24", "dcf9e77"),
        "--microbatch-group-size-per-virtual-pipeline-stage": ("2024-11-01", "441cb92"),
        "--use-torch-fsdp2": ("2024-11-13", "4c4215f"),
        "--cp-comm-type": ("2024-11-15", "2bdc60c"),
        "--hierarchical-context-parallel-sizes": ("2024-11-15", "2bdc60c"),
        "--expert-tensor-parallel-size": ("2024-11-23", "d392f9c"),
        "--attention-backend": ("2024-12-07", "9dc7fef"),
        "--moe-ffn-hidden-size": ("2024-12-07", "60d5b38"),
        "--moe-layer-freq": ("2024-12-07", "60d5b38"),
        "--moe-router-topk-scaling-factor": ("2024-12-20", "b8420a1"),
        "--moe-router-enable-expert-bias": ("2025-02-03", "c045c05"),
        "--moe-router-score-function": ("2025-02-03", "c045c05"),
        "--moe-router-bias-update-rate": ("2025-02-03", "c045c05"),
        "--grad-reduce-in-bf16": ("2025-02-26", "892c4c8"),
        "--use-custom-fsdp": ("2025-02-26", "892c4c8"),
        "--data-parallel-sharding-strategy": ("2025-02-26", "892c4c8"),
        "--torch-fsdp2-no-reshard-after-forward": ("2025-04-22", "1cb506c"),
        "--use-megatron-fsdp": ("2025-08-21", "4dd2f2b"),
        "--cpu-offloading-num-layers": ("2025-10-21", "3106714"),
        "--step-batch-size-schedule": ("2026-04-21", "532ad92"),
    }
)

# Options Megatron-LM removed or stopped honouring: the date, the commit, what happened.
UNTIL: Mapping[str, tuple[str, str, str]] = MappingProxyType(
    {
        "--activations-checkpoint-method": ("2022-05-20", "9aad920", "renamed --recompute-method"),
        "--activations-checkpoint-num-layers": (
            "2022-05-20",
            "9aad920",
            "renamed --recompute-num-layers",
        ),
        "--distribute-checkpointed-activations": (
            "2022-05-20",
            "9aad920",
            "renamed --distribute-saved-activations",
        ),
        "--checkpoint-activations": ("2023-05-05", "8619640", "Megatron-LM exits on it"),
        "--DDP-impl": ("2023-09-07", "e801b2b", "removed: Megatron-Core's DDP only"),
        "--use-custom-fsdp": ("2025-08-21", "4dd2f2b", "renamed --use-megatron-fsdp"),
        "--overlap-p2p-communication": (
            "2023-10-24",
            "3f554d9",
            "replaced by --no-overlap-p2p-communication (overlap the default)",
        ),
        # read by nothing since the pipeline code moved to megatron/core (3c92fa9, merged
        # edca71d, 2023-03-23); the option itself stayed until 10e7b74
        "--no-scatter-gather-tensors-in-pipeline": (
            "2026-04-04",
            "10e7b74",
            "removed, unused since Megatron-Core's pipeline",
        ),
    }
)
# --data-parallel-sharding-strategy defaulted to no_shard until 3499efe (2026-04-01, "Modify
# mfsdp default data-parallel-sharding-strategy"), then to optim_grads_params.
_STRATEGY_DEFAULT_CHANGED = ("2026-04-01", "3499efe")
# --recompute-num-layers defaulted to 1 until 115b677 (2023-09-05), then to None, which
# Megatron-Core refuses with full recomputation (transformer_config.py at 9dc7fef, 477-483).
_RECOMPUTE_LAYERS_DEFAULT_NONE = "2023-09-05"

for _table in (REFUSED, COST_NEUTRAL):  # each option in exactly one table
    assert not set(_table) & set(MAPPED)
assert not set(REFUSED) & set(COST_NEUTRAL)
assert all(option in MAPPED or option in REFUSED or option in COST_NEUTRAL for option in SINCE)


def known(option: str) -> bool:
    """Whether ``option`` is in one of the three tables."""
    return option in MAPPED or option in REFUSED or option in COST_NEUTRAL


# ---------------------------------------------------------------------------------------------
# Reading a launch script's words


def megatron_words_from_text(text: str, where: str) -> list[str]:
    """The Megatron-LM argument words of a launch script or an argument file's ``text``.

    Understood: shell-like words (:mod:`shlex`: single and double quotes, backslash escapes),
    ``#`` comments (a ``#`` opening a word, outside quotes), backslash-newline continuations.
    The words are those of the one command that holds the first known Megatron option
    (:func:`known`): from the first word after the last ``*.py`` word before that option (the
    training script: ``pretrain_gpt.py``), or from the command's first ``--`` word, to the end
    of the command, which is the end of its line or shell syntax (``|``, ``&&``, ``;``, ``>``,
    ``<``, ``&``, parentheses). Lines that follow and begin with ``--`` continue it (an argument
    file: options one or more to a line).

    Not understood: variables (no expansion: a word with ``$`` is refused, naming it; expand
    the script first: bash's xtrace prints it expanded), bash arrays, quotes spanning lines,
    here-documents, backslash-newline inside single quotes. Megatron options found again in a
    later command are refused: that is a script to expand into one launch line first."""
    lines = _logical_lines(text, where)
    start = next((i for i, words in enumerate(lines) if any(map(_is_known, words))), None)
    if start is None:
        for word in (w for words in lines for w in words):
            try:
                _refuse_variables(word)  # the options may be behind it
            except SpecError as error:
                raise SpecError(f"{where}: no Megatron-LM option found; {error}") from None
        raise SpecError(f"{where}: no Megatron-LM option found (e.g. --num-layers)")
    words = _command_words(lines[start])
    end = start + 1
    while (
        end < len(lines) and lines[end] and lines[end][0].startswith("--") and words[-1:] != [";"]
    ):
        words += _until_syntax(lines[end])
        end += 1
    words = [w for w in words if w != ";"]
    for later in range(end, len(lines)):
        again = next((w for w in lines[later] if _is_known(w)), None)
        if again is not None:
            raise SpecError(
                f"{where}: Megatron-LM options in more than one command ({again} again after "
                f"the command holding {_first_known(lines[start])}): expand the script into "
                "one launch line first"
            )
    for word in words:
        try:
            _refuse_variables(word)
        except SpecError as error:
            raise SpecError(f"{where}: {error}") from None
    return words


def _is_known(word: str) -> bool:
    return word.startswith("--") and known(word.partition("=")[0])


def _first_known(words: Sequence[str]) -> str:
    return next(w for w in words if _is_known(w)).partition("=")[0]


_OPERATORS = frozenset("|&;<>()")


def _logical_lines(text: str, where: str) -> list[list[str]]:
    """``text``'s commands, one list of words per line once continuations are joined and
    comments dropped."""
    joined = text.replace("\r\n", "\n").replace("\\\n", " ")
    lines = []
    for number, line in enumerate(joined.split("\n"), start=1):
        lexer = shlex.shlex(_without_comment(line), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        try:
            lines.append(list(lexer))
        except ValueError as error:
            raise SpecError(
                f"{where}: line {number}: {error} (quotes must close on their line)"
            ) from None
    return lines


def _without_comment(line: str) -> str:
    """``line`` up to a ``#`` that opens a word outside quotes (the shell's comment); a
    backslash escapes the next character outside single quotes."""
    quote = ""
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\" and quote != "'":
            index += 2
            continue
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index]
        index += 1
    return line


def _is_operator(word: str) -> bool:
    return bool(word) and set(word) <= _OPERATORS


def _until_syntax(words: Sequence[str]) -> list[str]:
    """``words`` up to shell syntax; ``[";"]`` appended when syntax ended them. The digits of
    a redirection (``2>&1``) are the shell's, not an argument."""
    for index, word in enumerate(words):
        if _is_operator(word):
            if word[0] in "<>" and index and words[index - 1].isdigit():
                index -= 1
            return [*words[:index], ";"]
    return list(words)


def _command_words(words: Sequence[str]) -> list[str]:
    """The Megatron arguments of the command ``words`` (see :func:`megatron_words_from_text`)."""
    first = next(i for i, w in enumerate(words) if _is_known(w))
    begin = 0
    for index in range(first - 1, -1, -1):
        if _is_operator(words[index]):
            begin = index + 1
            break
    scripts = [i for i in range(begin, first) if words[i].endswith(".py")]
    if scripts:
        begin = scripts[-1] + 1
    else:
        begin = next(i for i in range(begin, first + 1) if words[i].startswith("--"))
    return _until_syntax(words[begin:])


def _refuse_variables(word: str) -> None:
    """Refuse a word holding a shell variable (pipesim expands none)."""
    if "$" in word:
        raise SpecError(
            f"{word!r} holds a shell variable, which pipesim does not expand: expand the "
            "script first (bash's xtrace prints the expanded command), or paste the values"
        )


# ---------------------------------------------------------------------------------------------
# Reading the arguments


def run_from_megatron_args(
    words: Sequence[str],
    *,
    hardware: str,
    where: str = "Megatron-LM arguments",
    allow_ignored: bool = False,
    world_size: int | None = None,
    recipe: str | None = None,
    name: str = "megatron-gpt",
) -> tuple[RunFile, tuple[str, ...]]:
    """The run Megatron-LM's argument ``words`` launch, on ``hardware``, with the model stated
    inline (named ``name``: Megatron trains every decoder-only model as its ``GPTModel``); and
    the options ignored, one line each (only with ``allow_ignored``; without it they are
    refused).

    ``world_size`` (torchrun's nodes x processes per node, outside Megatron's arguments) gives
    D and M; without it they stay unstated. ``recipe`` names the Megatron-LM the arguments run
    on (one of :data:`MEGATRON_RECIPES`); without it, the era the options show (see the module
    docstring). Anything pipesim cannot state as Megatron-LM runs it is a :class:`SpecError`
    of one line naming ``where`` and the option."""
    try:
        return _translate(words, hardware, allow_ignored, world_size, recipe, name)
    except SpecError as error:
        raise SpecError(f"{where}: {error}") from None


class _Args:
    """The parsed options (the last of a repeated option wins, as with argparse), read with
    Megatron's defaults, and the options found ignored on the way."""

    def __init__(self, options: Mapping[str, tuple[str, ...]]) -> None:
        self.options = options
        self.ignored: list[tuple[str, str]] = []

    def has(self, option: str) -> bool:
        return option in self.options

    def word(self, option: str, default: str | None = None) -> str | None:
        return self.options[option][0] if option in self.options else default

    def integer(self, option: str, default: int | None = None) -> int | None:
        return int(self.options[option][0]) if option in self.options else default

    def number(self, option: str, default: float) -> float:
        return float(self.options[option][0]) if option in self.options else default

    def required(self, option: str, why: str = "Megatron-LM requires it") -> int:
        value = self.integer(option)
        if value is None:
            raise SpecError(f"{option} is missing: {why}")
        return value

    def positive(self, option: str, default: int) -> int:
        value = self.integer(option, default)
        assert value is not None
        if value < 1:
            raise SpecError(f"{option} must be an integer >= 1, got {value}")
        return value

    def ignore(self, option: str, why: str) -> None:
        """``option`` has no effect here (Megatron ignores it in this combination)."""
        if option in self.options and all(option != o for o, _ in self.ignored):
            self.ignored.append((option, why))


def _shown_option(option: str, values: Sequence[str]) -> str:
    """``option`` and its values as a shell would quote them (the first three)."""
    return shlex.join((option, *values[:3])) + (" ..." if len(values) > 3 else "")


def parse_options(words: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``words`` as ``{option: its values}``: an option is a word starting with ``--``
    (``--name=value`` too), its values the words up to the next option."""
    return parse_options_noting(words)[0]


def parse_options_noting(
    words: Sequence[str],
) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """:func:`parse_options`, and a note for each option given again with other values: the
    last is used, as Megatron-LM's argparse uses it (a launch script often sets a default and
    overrides it), and the note says which, so that nothing is dropped silently."""
    given: list[tuple[str, list[str]]] = []  # every option in order, with its values
    for word in words:
        if not isinstance(word, str):
            raise SpecError(f"arguments must be words (text), got {shown(word)}")
        _refuse_variables(word)
        if word.startswith("--") and len(word) > 2:
            option, equals, value = word.partition("=")
            given.append((option, [value] if equals else []))
        elif not given:
            raise SpecError(f"{word!r} stands before any option: give the words after the script")
        else:
            given[-1][1].append(word)
    options: dict[str, tuple[str, ...]] = {}
    earlier: dict[str, list[tuple[str, ...]]] = {}
    for option, values in given:
        if option in options:
            earlier.setdefault(option, []).append(options.pop(option))
        options[option] = tuple(values)
    notes = [
        f"{option} given {len(before) + 1} times: the last, "
        f"{_shown_option(option, options[option])}, is used, as Megatron-LM's argparse uses it"
        for option, before in earlier.items()
        if any(values != options[option] for values in before)
    ]
    return options, notes


def _offload_activations(
    args: _Args, arch: TransformerArchitecture, pipeline: int, recompute: Recompute
) -> int | None:
    """``--cpu-offloading-num-layers N`` (Megatron-Core's CPU offloading of the first N
    layers' activations, on when N > 0: 0 or less is none, as arguments.py turns it on), with
    Megatron-Core's refusals (transformer_config.py): N below the layers, no pipeline, no
    recomputation (``recompute``: what the line resolves to, ``--recompute-activations``
    too)."""
    option = "--cpu-offloading-num-layers"
    layers = args.integer(option, 0) or 0
    if layers <= 0:
        return None
    if not 0 < layers < arch.layers:
        raise SpecError(
            f"{option} {layers}: 'CPU offloading can be done only for layers less than "
            f"{arch.layers}' (Megatron-Core raises it)"
        )
    if pipeline > 1:
        raise SpecError(
            f"{option} {layers} with a pipeline of {pipeline} stages: 'Currently there is no "
            "support for Pipeline parallelism with CPU offloading' (Megatron-Core raises it)"
        )
    if recompute.mode is not RecomputeMode.NONE:
        raise SpecError(
            f"{option} {layers} with recomputation ({recompute.label}): 'CPU offloading does "
            "not work when activation recomputation is enabled' (Megatron-Core raises it)"
        )
    return layers


def _translate(
    words: Sequence[str],
    hardware: str,
    allow_ignored: bool,
    world_size: int | None,
    recipe_name: str | None,
    name: str,
) -> tuple[RunFile, tuple[str, ...]]:
    options, repeated = parse_options_noting(words)
    _screen(options)
    args = _Args(options)
    recipe = RECIPES[_recipe_name(options, recipe_name)]
    tensor = args.positive("--tensor-model-parallel-size", 1)
    arch, vocabulary = _architecture(args, tensor, recipe)
    context, comm = _context(args, arch, recipe)
    layout = _layout(args, arch, tensor, context, world_size, recipe)
    expert, expert_tensor = _expert_parallel(args, arch, tensor, context, layout.data)
    zero, reshard = _sharding(args, layout.pipeline, expert)
    recompute = _recompute(args, recipe.name)
    dtype = _dtype(args)
    model = megatron_model(
        arch,
        dtype=dtype,
        default_batch=layout.batch or layout.microbatch_size,
        name=name,
        gradient_bytes=_gradient_bytes(args, dtype),
        optimizer_bytes=_optimizer_bytes(args),
        vocabulary=vocabulary,
    )
    run = RunFile(
        model,
        hardware,
        batch=layout.batch,
        microbatch_size=layout.microbatch_size,
        tensor_parallel=tensor,
        sequence_parallel=args.has("--sequence-parallel") and tensor > 1,
        pipeline_parallel=layout.pipeline,
        data_parallel=layout.data,
        zero=zero,
        reshard_after_forward=reshard,
        context_parallel=context if context > 1 else None,
        cp_comm_type=comm,
        expert_parallel=expert if expert > 1 else None,
        expert_tensor_parallel=expert_tensor if expert_tensor != tensor else None,
        offload_activations=_offload_activations(args, arch, layout.pipeline, recompute),
        recompute=recompute.label,
        schedule="interleaved-1f1b" if layout.chunks > 1 else "1f1b",
        chunks=layout.chunks,
        microbatches=layout.microbatches,
        partition=",".join(map(str, layout.partition)),
        remat=False,
        recipe=recipe.name,
        overlap_grad_reduce=_overlap_grad_reduce(args),
        attention=_attention(args, recipe),
        blocking_p2p=_blocking_p2p(args, recipe, layout.chunks),
        scatter_gather_p2p=_scatter_gather_p2p(args, recipe),
        tp_comm_overlap=_tp_comm_overlap(args, recipe, tensor),
    )
    _check_fusion(args, recipe)
    if tensor == 1:
        args.ignore("--sequence-parallel", f"Megatron-LM turns it off at T = 1 ({_CORE})")
    ignored = [(o, COST_NEUTRAL[o]) for o in options if o in COST_NEUTRAL] + args.ignored
    if ignored and not allow_ignored:
        option, why = ignored[0]
        raise SpecError(
            f"{_shown_option(option, options[option])} does not change what pipesim simulates "
            f"({why}){_more(len(ignored) - 1, 'such option')}; {named('allow_ignored')} "
            "would list it as ignored"
        )
    ignored_notes = [f"{_shown_option(o, options[o])}: ignored ({why})" for o, why in ignored]
    return run, (*repeated, *ignored_notes)


def _more(count: int, what: str) -> str:
    return f" (and {count} more {what}{'s' if count > 1 else ''})" if count else ""


def _screen(options: Mapping[str, tuple[str, ...]]) -> None:
    """Refuse options pipesim does not know and features it does not model (the first named,
    the others counted), and values of the wrong kind."""
    unknown = [o for o in options if not known(o)]
    if unknown:
        also = f" (also unknown: {few(unknown[1:])})" if unknown[1:] else ""
        raise SpecError(
            f"{unknown[0]} is not a Megatron-LM option pipesim knows (neither translated nor "
            f"known to leave the cost unchanged), so it cannot tell what it changes{also}"
        )
    refused = [o for o in options if o in REFUSED and not _inert(options[o], REFUSED[o].inert)]
    if refused:
        first = refused[0]
        also = f" (also refused: {few(refused[1:])})" if refused[1:] else ""
        raise SpecError(f"{_shown_option(first, options[first])}: {REFUSED[first].why}{also}")
    for option, values in options.items():
        if option in MAPPED:
            _check_values(option, values, MAPPED[option])


def _inert(values: tuple[str, ...], inert: tuple[str, ...]) -> bool:
    """Whether ``values`` is one of the values that switch a refused feature off."""
    if len(values) != 1:
        return False
    try:
        return any(int(values[0]) == int(choice) for choice in inert)
    except ValueError:
        return values[0] in inert


def _check_values(option: str, values: tuple[str, ...], mapped: Mapped) -> None:
    """``values`` as ``mapped`` takes them (argparse's checks, in one line)."""
    takes = mapped.takes
    if takes is Takes.FLAG:
        if values:
            raise SpecError(f"{option} takes no value, got {' '.join(values)!r}")
        return
    if takes is Takes.WORDS:
        if not values:
            raise SpecError(f"{option} takes {takes.value}, got none")
        wrong = [value for value in values if mapped.choices and value not in mapped.choices]
        if wrong:
            raise SpecError(
                f"{option} must be one or more of {', '.join(mapped.choices)}, got {wrong[0]!r}"
            )
        return
    if len(values) != 1:
        raise SpecError(f"{option} takes {takes.value}, got {len(values)} words {values!r}")
    value = values[0]
    try:
        if takes is Takes.INT:
            int(value)
        elif takes is Takes.FLOAT and not math.isfinite(float(value)):
            raise ValueError(value)
    except ValueError:
        raise SpecError(f"{option} takes {takes.value}, got {value!r}") from None
    if mapped.choices and value not in mapped.choices:
        raise SpecError(f"{option} must be one of {', '.join(mapped.choices)}, got {value!r}")


# ---------------------------------------------------------------------------------------------
# The recipe


def _newest(options: Iterable[str]) -> str | None:
    """The option of ``options`` that reached Megatron-LM last (:data:`SINCE`), if any."""
    return max((o for o in options if o in SINCE), key=lambda o: SINCE[o][0], default=None)


def _recipe_name(options: Iterable[str], recipe: str | None) -> str:
    """The recipe named, or the era the options show; a line no Megatron-LM runs is refused."""
    newest = _newest(options)
    for option in options:
        if option in UNTIL and newest is not None and SINCE[newest][0] >= UNTIL[option][0]:
            date, commit, what = UNTIL[option]
            raise SpecError(
                f"{option} ({what} in {commit}, {date}) and {newest} (added in "
                f"{SINCE[newest][1]}, {SINCE[newest][0]}): no Megatron-LM has both"
            )
    if recipe is not None:
        if recipe not in MEGATRON_RECIPES:
            raise SpecError(
                f"recipe must be one of {', '.join(MEGATRON_RECIPES)} for Megatron-LM "
                f"arguments, got {recipe!r}"
            )
        return recipe
    if newest is None:
        return MEGATRON_RECIPES[0]
    return _era_of(SINCE[newest][0])


def _era_of(date: str) -> str:
    """The recipe whose era holds ``date`` (the last one after every era's end)."""
    return next(
        (name for name, (start, end) in ERAS.items() if start <= date < end),
        MEGATRON_RECIPES[-1],
    )


# ---------------------------------------------------------------------------------------------
# Sharded data parallelism

_TORCH_FSDP2 = "--use-torch-fsdp2"
_MEGATRON_FSDP = "--use-megatron-fsdp"
_CUSTOM_FSDP = "--use-custom-fsdp"
_STRATEGY = "--data-parallel-sharding-strategy"
_ARGUMENTS = "megatron/training/arguments.py"


def _sharding(args: _Args, pipeline: int, expert: int = 1) -> tuple[int, str | None]:
    """The ZeRO stage and the reshard policy (None: pipesim's default): the distributed
    optimizer is ZeRO-1; Megatron-FSDP's strategy names the stage; PyTorch FSDP2 is ZeRO-3.
    Megatron's own asserts on them are reproduced."""
    megatron_fsdp = next((o for o in (_MEGATRON_FSDP, _CUSTOM_FSDP) if args.has(o)), None)
    torch_fsdp = args.has(_TORCH_FSDP2)
    if not torch_fsdp:
        args.ignore(
            "--torch-fsdp2-no-reshard-after-forward", f"Megatron reads it with {_TORCH_FSDP2} only"
        )
    if megatron_fsdp is None:
        args.ignore(_STRATEGY, f"Megatron reads it with {_MEGATRON_FSDP} only")
    if torch_fsdp and megatron_fsdp is not None:
        raise SpecError(
            f"{_TORCH_FSDP2} beside {megatron_fsdp}: two FSDP implementations; Megatron-LM "
            "builds one (DistributedInitConfig.use_megatron_fsdp: 'Cannot be used together with "
            "use_torch_fsdp2')"
        )
    if torch_fsdp:
        return 3, _torch_fsdp2(args, pipeline, expert)
    if megatron_fsdp is not None:
        return _megatron_fsdp(args, megatron_fsdp, pipeline), None
    if args.word("--ckpt-format") == "fsdp_dtensor":
        raise SpecError(
            f"--ckpt-format fsdp_dtensor without {_MEGATRON_FSDP}: Megatron-LM asserts it "
            f"('only tested with Megatron FSDP', {_ARGUMENTS} since 4dd2f2b)"
        )
    args.ignore("--ckpt-format", _CHECKPOINT)
    return (1 if args.has("--use-distributed-optimizer") else 0), None


def _torch_fsdp2(args: _Args, pipeline: int, expert: int) -> str | None:
    """PyTorch FSDP2 (``fully_shard`` of each layer): ZeRO-3 without a pipeline, resharding
    after the forward unless ``--torch-fsdp2-no-reshard-after-forward``. Its gradients are
    reduce-scattered every micro-batch (Megatron's no_sync does nothing for it), as pipesim's
    ZeRO-3 without a pipeline does. validate_args' asserts, in its order (4c4215f to today)."""
    at = f"Megatron-LM asserts it, {_ARGUMENTS} since 4c4215f"
    if pipeline > 1:
        raise SpecError(
            f"{_TORCH_FSDP2} with --pipeline-model-parallel-size {pipeline}: '{_TORCH_FSDP2} is "
            f"not supported with pipeline parallelism' ({at})"
        )
    if expert > 1:
        raise SpecError(
            f"{_TORCH_FSDP2} with --expert-model-parallel-size {expert}: '{_TORCH_FSDP2} is not "
            f"supported with expert parallelism' ({at})"
        )
    if args.has("--use-distributed-optimizer"):
        raise SpecError(
            f"{_TORCH_FSDP2} beside --use-distributed-optimizer: 'not supported with MCore's "
            f"distributed optimizer' ({at})"
        )
    if not args.has("--no-gradient-accumulation-fusion"):
        raise SpecError(
            f"{_TORCH_FSDP2} needs --no-gradient-accumulation-fusion: '{_TORCH_FSDP2} is not "
            f"supported with gradient accumulation fusion' ({at})"
        )
    checkpoint = args.word("--ckpt-format", "torch_dist")
    if checkpoint not in ("torch_dist", "torch_dcp"):
        raise SpecError(
            f"{_TORCH_FSDP2} with --ckpt-format {checkpoint}: it requires torch_dist or "
            f"torch_dcp ({at})"
        )
    if not args.has("--untie-embeddings-and-output-weights"):
        raise SpecError(f"{_TORCH_FSDP2} needs --untie-embeddings-and-output-weights ({at})")
    if args.has("--fp16"):
        raise SpecError(f"{_TORCH_FSDP2} with --fp16: 'not supported with fp16 yet' ({at})")
    return "never" if args.has("--torch-fsdp2-no-reshard-after-forward") else None


def _megatron_fsdp(args: _Args, option: str, pipeline: int) -> int:
    """Megatron-FSDP's ZeRO stage (:data:`SHARDING_STRATEGIES`). Under optim_grads_params it
    frees each layer's gathered weights after its forward, as pipesim's ZeRO-3 without a
    pipeline does; under optim_grads and optim_grads_params it reduce-scatters every
    micro-batch's gradients, in a pipeline too (``grad_reduce_every_bprop``,
    megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py), which pipesim's
    pipelined ZeRO-2/3 (gradients held whole until the step's last backward) cannot state:
    refused with a pipeline."""
    strategy = args.word(_STRATEGY)
    if strategy is None:
        newest = _newest(args.options)
        date, commit = _STRATEGY_DEFAULT_CHANGED
        if option == _CUSTOM_FSDP:
            strategy = "no_shard"  # the default throughout --use-custom-fsdp's life
        elif newest is not None and SINCE[newest][0] >= date:
            strategy = "optim_grads_params"
        else:
            raise SpecError(
                f"{option} without {_STRATEGY}: its default was no_shard until {commit} "
                f"({date}) and optim_grads_params since, and no option of this line dates it; "
                f"give {_STRATEGY}"
            )
    zero = SHARDING_STRATEGIES[strategy]
    if option == _CUSTOM_FSDP:
        at = f"Megatron-LM asserts it, {_ARGUMENTS} 892c4c8 to 4dd2f2b"
        if not args.has("--use-distributed-optimizer"):
            raise SpecError(
                f"{option} needs --use-distributed-optimizer: '{option} only supported with "
                f"distributed optimizer' ({at})"
            )
        if zero >= 2 and not args.has("--no-gradient-accumulation-fusion"):
            raise SpecError(
                f"{option} with {_STRATEGY} {strategy} needs --no-gradient-accumulation-fusion: "
                f"'optim_grads_params optim_grads are not supported with gradient accumulation "
                f"fusion' ({at})"
            )
        args.ignore("--ckpt-format", _CHECKPOINT)
    else:
        checkpoint = args.word("--ckpt-format")
        if checkpoint != "fsdp_dtensor":
            given = f"--ckpt-format {checkpoint}" if checkpoint else "the default torch_dist"
            raise SpecError(
                f"{option} needs --ckpt-format fsdp_dtensor, got {given}: Megatron-LM asserts "
                f"it ({_ARGUMENTS} since 4dd2f2b)"
            )
    if zero >= 2 and pipeline > 1:
        raise SpecError(
            f"{option} with {_STRATEGY} {strategy} and --pipeline-model-parallel-size "
            f"{pipeline}: Megatron-FSDP reduce-scatters each micro-batch's gradients inside the "
            "pipeline too (grad_reduce_every_bprop, megatron_fsdp.py), where pipesim's "
            f"pipelined ZeRO-{zero} holds them whole until the step's last backward (PyTorch's "
            "pipelining)"
        )
    return zero


# ---------------------------------------------------------------------------------------------
# The model


def padded_vocab(vocab: int, multiple: int, tensor: int) -> int:
    """Megatron's ``_vocab_size_with_padding``: ``vocab`` rounded up to a multiple of
    ``multiple`` x T (megatron/training/tokenizer/tokenizer.py at 9dc7fef, 105-118)."""
    step = multiple * tensor
    return -(-vocab // step) * step


def _tokenizer_vocab(args: _Args) -> tuple[int, str]:
    """The vocabulary before padding, and what it is."""
    kind = args.word("--tokenizer-type", DEFAULT_TOKENIZER)
    if kind == DEFAULT_TOKENIZER:
        args.ignore("--vocab-size", f"{DEFAULT_TOKENIZER} reads GPT-2's {GPT2_VOCAB:,} tokens")
        return GPT2_VOCAB, f"{DEFAULT_TOKENIZER}'s {GPT2_VOCAB:,}"
    if kind == "NullTokenizer":
        vocab = args.required("--vocab-size", "NullTokenizer's vocabulary is --vocab-size + 1")
        if vocab < 1:
            raise SpecError(f"--vocab-size must be an integer >= 1, got {vocab}")
        return vocab + 1, f"NullTokenizer's --vocab-size {vocab} + 1"
    raise SpecError(
        f"--tokenizer-type {kind}: its vocabulary is its file's, which pipesim does not read; "
        f"give --tokenizer-type NullTokenizer --vocab-size <its size - 1> in its place"
    )


def _architecture(args: _Args, tensor: int, recipe: Recipe) -> tuple[TransformerArchitecture, str]:
    """The architecture the options build, and a word on its vocabulary."""
    layers = args.required("--num-layers")
    check(Limit.LAYERS, layers, f"--num-layers {layers:,}")
    hidden = args.required("--hidden-size")
    heads = args.required("--num-attention-heads")
    seq = args.required("--seq-length", "pipesim reads the sequence from it")
    positions = args.required("--max-position-embeddings")
    for option, value in (
        ("--num-layers", layers),
        ("--hidden-size", hidden),
        ("--num-attention-heads", heads),
        ("--seq-length", seq),
    ):
        if value < 1:
            raise SpecError(f"{option} must be an integer >= 1, got {value}")
    mla = _latent_attention(args, recipe)
    head_width = None if mla is not None else _head_width(args, hidden, heads)
    swiglu = args.has("--swiglu")
    default_ffn = int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden  # 9dc7fef 502-508
    ffn = args.positive("--ffn-hidden-size", default_ffn)
    moe = _experts(args, layers, ffn, swiglu, recipe)
    if (moe is not None or mla is not None) and not args.has("--disable-bias-linear"):
        option = "--num-experts" if moe is not None else "--multi-latent-attention"
        raise SpecError(
            f"{option} without --disable-bias-linear: biased experts and latent projections "
            "are not modelled (Megatron-Core's MoE and DeepSeek recipes disable the biases)"
        )
    position = _position(args, seq, positions)
    dropout = _dropout(args)
    raw, said = _tokenizer_vocab(args)
    multiple = args.positive("--make-vocab-size-divisible-by", DEFAULT_VOCAB_MULTIPLE)
    vocab = padded_vocab(raw, multiple, tensor)
    try:
        arch = TransformerArchitecture(
            layers,
            hidden,
            heads,
            ffn,
            seq,
            vocab,
            kv_heads=_kv_heads(args, heads, mla),
            mlp=Mlp.SWIGLU if swiglu else Mlp.GELU,
            norm=Norm.RMSNORM if args.word("--normalization") == "RMSNorm" else Norm.LAYERNORM,
            position=position,
            tied_embeddings=not args.has("--untie-embeddings-and-output-weights"),
            linear_bias=not args.has("--disable-bias-linear"),
            dropout=dropout,
            embedding_dropout=dropout,
            element_bytes=2 if _dtype(args) != "fp32" else 4,
            head_width=head_width,
            qk_norm=mla is None and args.has("--qk-layernorm"),
            moe=moe,
            mla=mla,
        )
    except SpecError as error:
        raise SpecError(f"the architecture: {error}") from None
    return arch, f"{said}, padded to a multiple of {multiple} x {tensor}: {vocab:,}"


def _head_width(args: _Args, hidden: int, heads: int) -> int | None:
    """Each head's width: ``--kv-channels`` where it is not hidden / heads (Qwen3's 128-wide
    heads), None (hidden / heads) otherwise. Megatron asserts that the heads divide the hidden
    width only without ``--kv-channels``."""
    width = args.integer("--kv-channels")
    if width is None:
        if hidden % heads:
            raise SpecError(
                f"--num-attention-heads {heads} must divide --hidden-size {hidden} (Megatron "
                "asserts it without --kv-channels)"
            )
        return None
    if width < 1:
        raise SpecError(f"--kv-channels must be an integer >= 1, got {width}")
    return None if hidden % heads == 0 and width == hidden // heads else width


def _kv_heads(args: _Args, heads: int, mla: MultiLatentAttention | None) -> int:
    """Key/value heads: --num-query-groups (default 1) with --group-query-attention; every
    head's own under latent attention."""
    if mla is not None:
        for option in ("--group-query-attention", "--num-query-groups"):
            args.ignore(option, "Megatron's latent attention gives every head its keys and values")
        return heads
    if not args.has("--group-query-attention"):
        args.ignore("--num-query-groups", "Megatron reads it only with --group-query-attention")
        return heads
    groups = args.positive("--num-query-groups", 1)
    if heads % groups:
        raise SpecError(f"--num-query-groups {groups} must divide --num-attention-heads {heads}")
    return groups


_CORE_RECIPE = MEGATRON_RECIPES[-1]


def _core_only(option: str, what: str, recipe: Recipe) -> None:
    """Refuse ``option`` under a recipe of Megatron-LM's legacy models."""
    if recipe.name != _CORE_RECIPE:
        raise SpecError(
            f"{option} under {recipe.name}: {what}; Megatron-Core's ({_CORE_RECIPE}) is translated"
        )


# --multi-latent-attention's sizes: Megatron's option, pipesim's field, Megatron's default
# (_add_mla_args, dcf9e77 to the snapshot).
_MLA_OPTIONS: tuple[tuple[str, str, int | None], ...] = (
    ("--q-lora-rank", "q_lora_rank", None),
    ("--kv-lora-rank", "kv_lora_rank", 32),
    ("--qk-head-dim", "qk_nope_head_dim", 128),
    ("--qk-pos-emb-head-dim", "qk_rope_head_dim", 64),
    ("--v-head-dim", "v_head_dim", 128),
)


def _latent_attention(args: _Args, recipe: Recipe) -> MultiLatentAttention | None:
    """DeepSeek's latent attention with ``--multi-latent-attention`` (Megatron-Core's
    MLASelfAttention), None without. Megatron norms the latents (the up-projections'
    layernorm-linear, gpt_layer_specs.py) only with ``--qk-layernorm``, which pipesim's latent
    attention, DeepSeek's, always has: refused without it."""
    option = "--multi-latent-attention"
    if not args.has(option):
        for name, _, _ in _MLA_OPTIONS:
            args.ignore(name, f"Megatron reads it with {option} only")
        return None
    _core_only(option, "Megatron-LM's legacy models have no latent attention", recipe)
    if not args.has("--qk-layernorm"):
        raise SpecError(
            f"{option} without --qk-layernorm: Megatron norms the latents only with it "
            "(gpt_layer_specs.py), where pipesim's latent attention (DeepSeek's) norms them"
        )
    args.ignore("--kv-channels", "Megatron's latent attention reads --qk-head-dim and --v-head-dim")
    sizes: dict[str, int | None] = {}
    for name, field, default in _MLA_OPTIONS:
        value = args.integer(name, default)
        if value is not None and value < 1:
            raise SpecError(f"{name} must be an integer >= 1, got {value}")
        sizes[field] = value
    return MultiLatentAttention(**sizes)  # type: ignore[arg-type]


# The options Megatron reads only with --num-experts.
_MOE_OPTIONS = (
    "--moe-router-topk",
    "--moe-ffn-hidden-size",
    "--moe-shared-expert-intermediate-size",
    "--moe-layer-freq",
    "--moe-router-load-balancing-type",
    "--moe-expert-capacity-factor",
    "--moe-pad-expert-input-to-capacity",
    "--moe-token-dispatcher-type",
    "--moe-router-enable-expert-bias",
    "--moe-router-score-function",
)
_BALANCING = {kind.value: kind for kind in LoadBalancing}


def _experts(
    args: _Args, layers: int, ffn: int, swiglu: bool, recipe: Recipe
) -> MixtureOfExperts | None:
    """Megatron-Core's mixture of experts with ``--num-experts`` (0, or none: a dense model):
    the experts SwiGLU's with ``--swiglu`` as the dense MLP is, each ``--moe-ffn-hidden-size``
    (default ``--ffn-hidden-size``) wide; the shared experts, one MLP of
    ``--moe-shared-expert-intermediate-size`` in Megatron, as that many experts of the routed
    width where it divides, else one; the MoE blocks as ``--moe-layer-freq`` places them."""
    experts = args.integer("--num-experts", 0) or 0
    if experts < 0:
        raise SpecError(f"--num-experts must be an integer >= 0, got {experts}")
    if experts == 0:  # validate_args: 0 is None, no experts
        for option in _MOE_OPTIONS:
            args.ignore(option, "Megatron reads it with --num-experts only")
        return None
    _core_only(
        "--num-experts",
        "Megatron-LM's legacy models run it as SwitchMLP (top-1 routing, the experts one after "
        "another, 53f3efc), which is not translated",
        recipe,
    )
    top_k = args.positive("--moe-router-topk", 2)
    if top_k > experts:
        raise SpecError(f"--moe-router-topk {top_k} must be at most --num-experts {experts}")
    expert_ffn = args.positive("--moe-ffn-hidden-size", ffn)
    shared = args.integer("--moe-shared-expert-intermediate-size")
    if shared is not None and shared <= 0:
        raise SpecError(
            f"--moe-shared-expert-intermediate-size must be > 0 (Megatron raises), got {shared}"
        )
    count, width = (0, None) if shared is None else _shared(shared, expert_ffn)
    first_dense, frequency = _moe_layers(args, layers)
    balancing = _load_balancing(args)
    capacity = _capacity(args, balancing)
    pad = args.has("--moe-pad-expert-input-to-capacity")
    if pad and capacity is None:
        raise SpecError(
            "--moe-pad-expert-input-to-capacity without a --moe-expert-capacity-factor >= 0: "
            "'moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity' "
            "(Megatron-Core raises it)"
        )
    bias = args.has("--moe-router-enable-expert-bias")
    score = args.word("--moe-router-score-function", "softmax")
    if bias and score not in ("sigmoid", "sqrtsoftplus"):
        raise SpecError(
            f"--moe-router-enable-expert-bias with --moe-router-score-function {score}: "
            "'Expert bias for aux-loss-free routing only supports sigmoid' (Megatron-Core "
            "raises it, transformer_config.py since c045c05)"
        )
    return MixtureOfExperts(
        experts,
        top_k,
        expert_ffn,
        shared_experts=count,
        shared_expert_ffn=width,
        first_dense_layers=first_dense,
        layer_frequency=frequency,
        gated=swiglu,
        capacity_factor=capacity,
        pad_to_capacity=pad,
        load_balancing=balancing,
        expert_bias=bias,
    )


def _shared(width: int, expert_ffn: int) -> tuple[int, int | None]:
    """Shared experts of ``width`` together: that many of the routed experts' width where it
    divides (DeepSeek's 2 x 1408), else one of ``width``. Megatron runs them as one MLP either
    way, and pipesim costs their width alone."""
    if width % expert_ffn == 0:
        return width // expert_ffn, None
    return 1, width


def _load_balancing(args: _Args) -> LoadBalancing:
    """``--moe-router-load-balancing-type``: one type (Megatron-Core takes several since
    their list form; pipesim's moe.load_balancing states one)."""
    option = "--moe-router-load-balancing-type"
    kinds = dict.fromkeys(args.options.get(option, ("aux_loss",)))
    if len(kinds) > 1:
        raise SpecError(
            f"{option} {' '.join(kinds)}: several load-balancing losses; pipesim's "
            "moe.load_balancing states one"
        )
    kind = next(iter(kinds))
    if kind not in _BALANCING:
        raise SpecError(
            f"{option} {kind}: pipesim's moe.load_balancing states {', '.join(_BALANCING)}"
        )
    return _BALANCING[kind]


def _capacity(args: _Args, balancing: LoadBalancing) -> float | None:
    """``--moe-expert-capacity-factor``: None (dropless) without it or when negative (Megatron
    turns a negative factor off); Megatron refuses it beside Sinkhorn's balancing."""
    option = "--moe-expert-capacity-factor"
    if not args.has(option):
        return None
    factor = args.number(option, -1.0)
    if factor < 0:
        return None
    if factor == 0:
        raise SpecError(f"{option} 0: no expert would take a token (negative: dropless)")
    if balancing is LoadBalancing.SINKHORN:
        raise SpecError(
            f"{option} with --moe-router-load-balancing-type sinkhorn: 'moe_expert_capacity_factor "
            "only works with aux_loss ... or none load balancing' (Megatron-Core raises it)"
        )
    return factor


def _moe_layers(args: _Args, layers: int) -> tuple[int, int]:
    """(first_dense_layers, layer_frequency) of ``--moe-layer-freq``: an integer N makes
    block i an MoE block when i % N == 0 (gpt_layer_specs.py), pipesim's layer_frequency; a
    list of 0s and 1s (a Python expression Megatron evaluates, of + and * here) must be that
    pattern from some leading dense blocks on, which are first_dense_layers."""
    option = "--moe-layer-freq"
    text = args.word(option, "1")
    assert text is not None
    if "[" not in text:
        try:
            frequency = int(text)
        except ValueError:
            raise SpecError(
                f"{option} {shown(text)}: an integer or a list of 0s and 1s (Megatron's "
                "moe_freq_type)"
            ) from None
        if frequency < 1:
            raise SpecError(f"{option} must be an integer >= 1, got {frequency}")
        return 0, frequency
    pattern = layer_pattern(text, layers)
    if len(pattern) != layers:
        raise SpecError(
            f"{option} {shown(text)}: 'Invalid length of moe_layer_pattern: {len(pattern)}, "
            f"expected {layers}' (Megatron asserts one entry per layer)"
        )
    if 1 not in pattern:
        raise SpecError(f"{option} {shown(text)}: no block is a mixture-of-experts block")
    blocks = [i for i, p in enumerate(pattern) if p]
    first = blocks[0]
    # the gap between MoE blocks; one block alone: the least N that places no other
    gaps = [blocks[1] - first] if len(blocks) > 1 else range(max(layers - first, 1), layers + 1)
    frequency = next((n for n in gaps if first % n == 0), 0)
    if frequency and all(
        bool(p) == (i >= first and i % frequency == 0) for i, p in enumerate(pattern)
    ):
        return first, frequency
    raise SpecError(
        f"{option} {shown(text)}: MoE blocks {few(blocks)}; pipesim places them every "
        "layer_frequency-th block (counted from block 0) after first_dense_layers dense ones"
    )


def layer_pattern(text: str, layers: int) -> list[int]:
    """The list of 0s and 1s that ``--moe-layer-freq``'s expression (``"([0]*1+[1]*26)"``)
    evaluates to, read without Python's eval: lists of 0 and 1, counts, + and *, parentheses;
    a list longer than ``layers`` is refused on the way."""
    where = f"--moe-layer-freq {shown(text)}"
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise SpecError(f"{where}: not a Python list expression") from None

    def value(node: ast.expr) -> list[int] | int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return _bounded(node.value, where, layers)
        if isinstance(node, ast.List):
            items = []
            for item in node.elts:
                entry = value(item)
                if isinstance(entry, list) or entry not in (0, 1):
                    raise SpecError(f"{where}: a list's entries are 0 (dense) or 1 (experts)")
                items.append(entry)
            return items
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            add = isinstance(node.op, ast.Add)
            return _combined(value(node.left), value(node.right), add, where, layers)
        raise SpecError(
            f"{where}: pipesim reads lists of 0s and 1s joined by + and * (Megatron evaluates "
            "any Python)"
        )

    try:
        pattern = value(tree)
    except RecursionError:
        raise SpecError(f"{where}: nested too deeply") from None
    if not isinstance(pattern, list):
        raise SpecError(f"{where}: not a list")
    return pattern


def _bounded(count: int, where: str, layers: int) -> int:
    if not 0 <= count <= max(layers, 1):
        raise SpecError(f"{where}: {count} is not a count of the {layers} layers")
    return count


def _combined(
    left: list[int] | int, right: list[int] | int, add: bool, where: str, layers: int
) -> list[int] | int:
    """``left + right`` or ``left * right`` of :func:`layer_pattern`'s values, bounded."""
    if isinstance(left, int) and isinstance(right, int):
        return _bounded(left + right if add else left * right, where, layers)
    if add and isinstance(left, list) and isinstance(right, list):
        pattern, times = left + right, 1
    elif not add and isinstance(left, list) and isinstance(right, int):
        pattern, times = left, right
    elif not add and isinstance(left, int) and isinstance(right, list):
        pattern, times = right, left
    else:
        raise SpecError(f"{where}: only lists added together, and lists times counts")
    if len(pattern) * times > layers:  # before the list is built
        raise SpecError(f"{where}: longer than --num-layers {layers}")
    return pattern * times


def _position(args: _Args, seq: int, positions: int) -> Position:
    """Position embeddings; a learned table must have ``seq`` rows (pipesim's)."""
    kind = args.word("--position-embedding-type") or "learned_absolute"
    if args.has("--use-rotary-position-embeddings"):
        kind = "rope"  # validate_args, 9dc7fef 645-646
    if positions < seq:
        raise SpecError(
            f"--max-position-embeddings {positions} must be >= --seq-length {seq} (Megatron "
            "asserts it)"
        )
    if kind == "learned_absolute" and positions != seq:
        raise SpecError(
            f"--max-position-embeddings {positions} with learned positions: pipesim's position "
            f"table has --seq-length = {seq} rows"
        )
    return {"learned_absolute": Position.LEARNED, "rope": Position.ROPE}.get(kind, Position.NONE)


def _dropout(args: _Args) -> bool:
    """Dropout on (both probabilities > 0) or off (both 0): pipesim's one switch."""
    attention = args.number("--attention-dropout", DEFAULT_DROPOUT)
    hidden = args.number("--hidden-dropout", DEFAULT_DROPOUT)
    if (attention == 0) != (hidden == 0):
        option = "--attention-dropout" if attention == 0 else "--hidden-dropout"
        raise SpecError(
            f"{option} 0 beside the other's {max(attention, hidden):g}: pipesim's dropout is "
            "one switch for the attention probabilities, the projections and the embeddings"
        )
    return attention != 0


def _dtype(args: _Args) -> str:
    if args.has("--fp16") and args.has("--bf16"):
        raise SpecError("--fp16 and --bf16 together (Megatron asserts one)")
    return "fp16" if args.has("--fp16") else "bf16" if args.has("--bf16") else "fp32"


def _gradient_bytes(args: _Args, dtype: str) -> float:
    """fp16 gradients, fp32 under bf16 (validate_args forces fp32 accumulation, 9dc7fef 419-427)
    or ``--accumulate-allreduce-grads-in-fp32``, bf16 with ``--grad-reduce-in-bf16`` (892c4c8)."""
    if dtype == "fp32":
        return 4.0
    if dtype == "bf16" and args.has("--grad-reduce-in-bf16"):
        return 2.0
    args.ignore("--grad-reduce-in-bf16", "Megatron reads it under --bf16 only")
    if dtype == "bf16" or args.has("--accumulate-allreduce-grads-in-fp32"):
        return 4.0
    return 2.0


def _optimizer_bytes(args: _Args) -> float:
    """Adam's two fp32 moments, or SGD's momentum buffer (none with ``--sgd-momentum 0``)."""
    if args.word("--optimizer", "adam") == "adam":
        args.ignore("--sgd-momentum", "Megatron reads it with --optimizer sgd only")
        return 8.0
    return 4.0 if args.number("--sgd-momentum", 0.9) != 0 else 0.0


def megatron_model(
    arch: TransformerArchitecture,
    *,
    dtype: str,
    default_batch: int,
    name: str = "megatron-gpt",
    gradient_bytes: float | None = None,
    optimizer_bytes: float = 8.0,
    vocabulary: str = "",
) -> Model:
    """``arch`` as Megatron-LM trains it in ``dtype``: fp16/bf16 weights with fp32 master
    weights (fp32 weights alone for ``fp32``), gradients of ``gradient_bytes`` (default: fp16's
    2, bf16's and fp32's 4), Adam's 8 bytes of state (``optimizer_bytes``: SGD's 4 or 0), and a
    fused optimizer step that allocates nothing (apex's FusedAdam in 2021, Transformer
    Engine's in 2024), as the catalogue's ``megatron-*`` models are built."""
    mixed = dtype != "fp32"
    if gradient_bytes is None:
        gradient_bytes = 2.0 if dtype == "fp16" else 4.0
    extra = ""
    if arch.moe is not None:
        moe = arch.moe
        extra += f", {moe.experts} experts of ffn {moe.expert_ffn} (top-{moe.top_k}"
        extra += f", {moe.shared_width} shared)" if moe.shared_width else ")"
    if arch.mla is not None:
        extra += f", latent attention (kv rank {arch.mla.kv_lora_rank})"
    return from_architecture(
        name,
        arch,
        dtype=dtype,
        default_batch=default_batch,
        description=f"from Megatron-LM arguments: {arch.layers} layers, hidden {arch.hidden}, "
        f"{arch.heads} heads ({arch.key_value_heads} key/value), ffn {arch.ffn}{extra}, seq "
        f"{arch.seq}, vocabulary {vocabulary or f'{arch.vocab:,}'}",
        weight_bytes=2.0 if mixed else 4.0,
        gradient_bytes=gradient_bytes,
        optimizer_bytes=optimizer_bytes,
        master_weight_bytes=4.0 if mixed else 0.0,
        optimizer_temporary_bytes=0.0,
    )


# ---------------------------------------------------------------------------------------------
# The layout


@dataclass(frozen=True)
class _Layout:
    pipeline: int
    data: int | None
    microbatch_size: int
    batch: int | None
    microbatches: int | None
    chunks: int
    partition: tuple[int, ...]


def _layout(
    args: _Args,
    arch: TransformerArchitecture,
    tensor: int,
    context: int,
    world_size: int | None,
    recipe: Recipe,
) -> _Layout:
    """P, D = world / (T x P x CP), the batch, M, v and the partition."""
    pipeline = args.positive("--pipeline-model-parallel-size", 1)
    data = None
    if world_size is not None:
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise SpecError(
                f"{named('world_size')} must be an integer >= 1, got {shown(world_size)}"
            )
        model_size = tensor * pipeline * context
        if world_size % model_size:
            cp = " x --context-parallel-size" if context > 1 else ""
            raise SpecError(
                f"world size {world_size} is not a multiple of --tensor-model-parallel-size "
                f"x --pipeline-model-parallel-size{cp} = {model_size} (Megatron asserts it)"
            )
        data = world_size // model_size
    micro = args.required("--micro-batch-size")
    if micro < 1:
        raise SpecError(f"--micro-batch-size must be an integer >= 1, got {micro}")
    batch = args.integer("--global-batch-size")
    if batch is None and data is not None:
        batch = micro * data  # validate_args: global = micro x D, one micro-batch
    microbatches = None
    if batch is not None:
        if batch < 1:
            raise SpecError(f"--global-batch-size must be an integer >= 1, got {batch}")
        if data is not None:
            if batch % (micro * data):
                raise SpecError(
                    f"--global-batch-size {batch} is not a multiple of --micro-batch-size x D "
                    f"= {micro} x {data} (Megatron asserts it)"
                )
            microbatches = batch // (micro * data)
    chunks = _chunks(args, arch.layers, pipeline, recipe)
    partition = _partition(args, arch.layers, pipeline, chunks)
    return _Layout(pipeline, data, micro, batch, microbatches, chunks, partition)


def _context(args: _Args, arch: TransformerArchitecture, recipe: Recipe) -> tuple[int, str | None]:
    """CP, and the run's cp_comm_type (None without --cp-comm-type: p2p, Megatron's default and
    pipesim's). Megatron's asserts: not in legacy models (validate_args, 9dc7fef), only
    Transformer Engine's attention ('Context parallelism is only supported by
    TEDotProductAttention!'), the sequence a multiple of 2 x CP (validate_args, since
    de17427), one --cp-comm-type or one per layer (TransformerConfig)."""
    context = args.positive("--context-parallel-size", 1)
    if context == 1:
        args.ignore("--cp-comm-type", "Megatron reads it with --context-parallel-size > 1 only")
        return 1, None
    option = f"--context-parallel-size {context}"
    _core_only(option, "'Context parallelism is not supported in legacy models'", recipe)
    if args.word("--transformer-impl", "transformer_engine") == "local":
        raise SpecError(
            f"{option} with --transformer-impl local: 'Context parallelism is only supported by "
            "TEDotProductAttention!' (Megatron-Core asserts it, dot_product_attention.py)"
        )
    if arch.seq % (2 * context):
        raise SpecError(
            f"--seq-length {arch.seq} with {option}: 'seq-length should be a multiple of 2 * "
            "context-parallel-size' (Megatron asserts it)"
        )
    values = args.options.get("--cp-comm-type")
    return context, None if values is None else _cp_comm_type(values, arch.layers)


# --cp-comm-type's values as Transformer Engine reads them (attn_forward_func_with_cp): what
# pipesim states, or why it does not.
_CP_COMM: Mapping[str, str] = MappingProxyType({"p2p": "p2p", "all_gather": "all-gather"})
_CP_COMM_REFUSED: Mapping[str, str] = MappingProxyType(
    {
        "a2a": "the heads exchanged by all-to-alls (DeepSpeed-Ulysses) are not modelled",
        "a2a+p2p": "hierarchical context parallelism (all-to-alls inside groups, a ring between "
        "them) is not modelled",
        "allgather": "Transformer Engine, which runs Megatron's context parallelism, names it "
        "all_gather and raises on allgather (Megatron's help text spells it so); give all_gather",
    }
)


def _cp_comm_type(values: Sequence[str], layers: int) -> str:
    """The one communication type of ``--cp-comm-type`` (its values: one, or one per layer)."""
    option = "--cp-comm-type"
    if len(values) > 1 and len(values) != layers:
        raise SpecError(
            f"{option} gives {len(values)} types for --num-layers {layers}: Megatron asserts one, "
            "or one per layer"
        )
    kinds = list(dict.fromkeys(values))
    if len(kinds) > 1:
        raise SpecError(
            f"{option} {few(kinds)}: a type per layer; pipesim's cp_comm_type is one for every "
            "layer"
        )
    kind = kinds[0]
    if kind in _CP_COMM_REFUSED:
        raise SpecError(f"{option} {kind}: {_CP_COMM_REFUSED[kind]}")
    if kind not in _CP_COMM:
        raise SpecError(
            f"{option} {kind}: not a type Transformer Engine runs (p2p, all_gather, a2a, a2a+p2p)"
        )
    return _CP_COMM[kind]


def _expert_parallel(
    args: _Args,
    arch: TransformerArchitecture,
    tensor: int,
    context: int,
    data: int | None,
) -> tuple[int, int]:
    """(EP, ETP), with Megatron's asserts: experts to divide (validate_args), their count a
    multiple of EP, the expert groups whole (parallel_state: world % (ETP x EP x P) == 0,
    at ETP = T that EP divides D x CP), ETP's own (:func:`_expert_tensor`); the token
    dispatcher (:func:`_dispatcher`)."""
    expert = args.positive("--expert-model-parallel-size", 1)
    moe = arch.moe
    option = "--expert-tensor-parallel-size"
    if moe is None:
        args.ignore(option, "Megatron reads it with --num-experts only")
        if expert > 1:
            raise SpecError(
                f"--expert-model-parallel-size {expert} without --num-experts: 'num_experts must "
                "be non None to use expert model parallelism' (Megatron asserts it)"
            )
        return 1, tensor
    if moe.experts % expert:
        raise SpecError(
            f"--num-experts {moe.experts} with --expert-model-parallel-size {expert}: 'Number of "
            "experts should be a multiple of expert model parallel_size' (Megatron asserts it)"
        )
    expert_tensor = _expert_tensor(args, moe.expert_ffn, tensor)
    if data is not None and (tensor * data * context) % (expert * expert_tensor):
        ranks = "D x CP" if expert_tensor == tensor else "T x CP x D"
        stage = data * context if expert_tensor == tensor else tensor * data * context
        what = (
            f"--expert-model-parallel-size {expert}"
            if expert_tensor == tensor
            else f"{option} {expert_tensor} x --expert-model-parallel-size {expert}"
        )
        raise SpecError(
            f"{what} must divide {ranks} = {stage}: "
            "Megatron's expert groups hold ETP x EP x P of the world's ranks (parallel_state: "
            "'world_size is not divisible by expert_tensor_model_pipeline_parallel size')"
        )
    _dispatcher(args, expert, tensor, expert_tensor)
    return expert, expert_tensor


def _expert_tensor(args: _Args, expert_ffn: int, tensor: int) -> int:
    """``--expert-tensor-parallel-size`` (default T: arguments.py sets it to
    --tensor-model-parallel-size), with what Megatron-Core checks of a size of its own: each
    expert's width divisible by it (the expert linears' ``divide``: '... is not divisible by
    ...'), and sequence parallelism beside T > 1 (MoELayer raises 'performance may degrade
    if MoE and tensor parallelism are enabled without also enabling sequence parallelism' in
    training; pipesim models that case at ETP = T only)."""
    option = "--expert-tensor-parallel-size"
    expert_tensor = args.positive(option, tensor)
    if expert_tensor == tensor:
        return tensor
    if expert_ffn % expert_tensor:
        raise SpecError(
            f"{option} {expert_tensor} with --moe-ffn-hidden-size {expert_ffn}: '{expert_ffn} "
            f"is not divisible by {expert_tensor}' (Megatron's divide() asserts it)"
        )
    if tensor > 1 and not args.has("--sequence-parallel"):
        raise SpecError(
            f"{option} {expert_tensor} with --tensor-model-parallel-size {tensor} and no "
            "--sequence-parallel: 'performance may degrade if MoE and tensor parallelism are "
            "enabled without also enabling sequence parallelism' (Megatron-Core's MoELayer "
            "raises it in training)"
        )
    return expert_tensor


def _dispatcher(args: _Args, expert: int, tensor: int, expert_tensor: int) -> None:
    """``--moe-token-dispatcher-type`` (default allgather): pipesim's expert parallelism is
    the alltoall dispatcher's all-to-alls; without EP the allgather dispatcher's gather over
    the T ranks is what pipesim's MoE block runs, and with T = 1 nothing is exchanged; with
    ETP != T pipesim's MoE block is the alltoall dispatcher's, which the allgather one is only
    where it exchanges nothing (ETP = EP = 1). flex (DeepEP's and HybridEP's fused kernels)
    is not modelled."""
    option = "--moe-token-dispatcher-type"
    kind = args.word(option, "allgather")
    if kind == "alltoall":
        return
    if kind == "allgather" and expert_tensor != tensor and expert * expert_tensor > 1:
        raise SpecError(
            f"{option} allgather with --expert-tensor-parallel-size {expert_tensor}: it gathers "
            "every token on each of the ETP x EP ranks, where pipesim models the alltoall "
            "dispatcher's gather of the routed tokens; give alltoall"
        )
    if kind == "flex":
        raise SpecError(
            f"{option} flex: DeepEP's or HybridEP's fused dispatch and combine are not modelled "
            "(pipesim's are the alltoall dispatcher's)"
        )
    if kind == "allgather" and expert > 1:
        raise SpecError(
            f"{option} allgather with --expert-model-parallel-size {expert}: it gathers every "
            "token on each of the T x EP ranks, where pipesim models the alltoall dispatcher's "
            "all-to-alls; give alltoall"
        )
    if kind == "alltoall_seq" and expert * tensor > 1:
        raise SpecError(
            f"{option} alltoall_seq: its all-to-alls over the T x EP ranks are not modelled "
            "(pipesim's are the alltoall dispatcher's)"
        )


def _chunks(args: _Args, layers: int, pipeline: int, recipe: Recipe) -> int:
    """v = layers / (P x N) with ``--num-layers-per-virtual-pipeline-stage N`` (1 without)."""
    per_virtual = args.integer("--num-layers-per-virtual-pipeline-stage")
    if per_virtual is None:
        return 1
    if per_virtual < 1:
        raise SpecError(f"--num-layers-per-virtual-pipeline-stage must be >= 1, got {per_virtual}")
    if layers % pipeline or (layers // pipeline) % per_virtual:
        raise SpecError(
            f"--num-layers-per-virtual-pipeline-stage {per_virtual} must divide --num-layers "
            f"{layers} / --pipeline-model-parallel-size {pipeline} (Megatron asserts it)"
        )
    overlapped = recipe.name == MEGATRON_RECIPES[-1] and not args.has(
        "--no-overlap-p2p-communication"
    )
    least = 2 if overlapped or args.has("--overlap-p2p-communication") else 3
    if pipeline < least:
        raise SpecError(
            f"--num-layers-per-virtual-pipeline-stage with --pipeline-model-parallel-size "
            f"{pipeline}: Megatron's interleaved schedule asserts P >= {least} ({_SC21}; {_CORE})"
        )
    return layers // pipeline // per_virtual


def megatron_partition(
    layers: int, pipeline: int, chunks: int, first: int | None = None, last: int | None = None
) -> tuple[int, ...]:
    """Megatron's layout in pipesim's layer counts, one per stage (chunk c of device d is
    stage c x P + d): the blocks split evenly, or ``first`` and ``last`` blocks on the end
    stages and the rest even (transformer_block.py at 9dc7fef, 56-84); the embedding joins
    the first stage, the output layer the last."""
    stages = pipeline * chunks
    if first is None and last is None:
        counts = [layers // stages] * stages
    else:
        ends = [x for x in (first, last) if x is not None]
        middle = stages - len(ends)
        rest = layers - sum(ends)
        # Megatron-Core's TransformerConfig: middle blocks and middle stages both or neither
        # (transformer_config.py, "Ensure you either have middle pp stages and layers or none
        # of them"), and the middle blocks split evenly over the middle stages.
        if rest < 0 or bool(rest) != bool(middle) or (middle and rest % middle):
            raise SpecError(
                f"--decoder-first/last-pipeline-num-layers {first}/{last}: the other "
                f"{layers - sum(ends)} blocks must split evenly over the other {middle} stages "
                "(Megatron asserts it)"
            )
        counts = [rest // middle if middle else 0] * stages
        if first is not None:
            counts[0] = first
        if last is not None:
            counts[-1] = last
    counts[0] += 1
    counts[-1] += 1
    return tuple(counts)


def _partition(args: _Args, layers: int, pipeline: int, chunks: int) -> tuple[int, ...]:
    first = args.integer("--decoder-first-pipeline-num-layers")
    last = args.integer("--decoder-last-pipeline-num-layers")
    if first is None and last is None:
        if layers % pipeline:
            raise SpecError(
                f"--num-layers {layers} is not a multiple of --pipeline-model-parallel-size "
                f"{pipeline} (Megatron asserts it)"
            )
        return megatron_partition(layers, pipeline, chunks)
    if chunks > 1:
        raise SpecError(
            "--decoder-first/last-pipeline-num-layers with interleaving: Megatron asserts "
            "against it (transformer_block.py at 9dc7fef, 56-59)"
        )
    if pipeline == 1:
        raise SpecError("--decoder-first/last-pipeline-num-layers need P >= 2")
    return megatron_partition(layers, pipeline, 1, first, last)


def _recompute(args: _Args, recipe: str) -> Recompute:
    """pipesim's recomputation for sc21's options or the later ones."""
    old = [o for o in args.options if o in _OLD_RECOMPUTE]
    new = [o for o in args.options if o in _NEW_RECOMPUTE]
    default = None if ERAS[recipe][1] > _RECOMPUTE_LAYERS_DEFAULT_NONE else 1
    if old == ["--checkpoint-activations"] and new:  # 9aad920: full granularity, uniform
        return _full("uniform", args.integer("--recompute-num-layers", default), new[0])
    if old and new:
        raise SpecError(f"{old[0]} beside {new[0]}: no Megatron-LM reads both")
    if old:
        method = args.word("--activations-checkpoint-method")
        if method is None and args.has("--checkpoint-activations"):
            method = "uniform"  # 6985e58 arguments.py 94-99; 9aad920: full, uniform
        if method is None:
            args.ignore("--activations-checkpoint-num-layers", "no checkpoint method given")
            return Recompute()
        count = args.integer("--activations-checkpoint-num-layers", 1)
        return _full(method, count, "--activations-checkpoint-num-layers")
    granularity = "selective" if args.has("--recompute-activations") else None
    granularity = args.word("--recompute-granularity", granularity)
    if granularity is None:
        for option in ("--recompute-method", "--recompute-num-layers"):
            args.ignore(option, "Megatron reads it with --recompute-granularity full only")
        return Recompute()
    if granularity == "selective":
        for option in ("--recompute-method", "--recompute-num-layers"):
            if args.has(option):
                raise SpecError(f"{option} with selective recomputation: Megatron refuses it")
        return Recompute(RecomputeMode.SELECTIVE)
    method = args.word("--recompute-method")
    if method is None:
        raise SpecError(
            "--recompute-granularity full needs --recompute-method uniform or block "
            "(Megatron raises without one)"
        )
    count = args.integer("--recompute-num-layers", default)
    if count is None:
        raise SpecError(
            "--recompute-granularity full needs --recompute-num-layers (Megatron-Core raises "
            "without it: transformer_config.py at 9dc7fef, 477-483)"
        )
    return _full(method, count, "--recompute-num-layers")


_OLD_RECOMPUTE = (
    "--checkpoint-activations",
    "--activations-checkpoint-method",
    "--activations-checkpoint-num-layers",
)
_NEW_RECOMPUTE = (
    "--recompute-activations",
    "--recompute-granularity",
    "--recompute-method",
    "--recompute-num-layers",
)


def _full(method: str, count: int | None, option: str) -> Recompute:
    """Full recomputation by ``method`` with ``count`` layers (a unit, or a stage's first)."""
    if count is None or count < 1:
        raise SpecError(f"{option} must be an integer >= 1, got {count}")
    if method == "block":
        return Recompute(RecomputeMode.FULL, count)
    if count == 1:
        return Recompute(RecomputeMode.FULL)
    raise SpecError(
        f"{option} {count} with the uniform method: a unit of {count} layers stashes one input, "
        "which pipesim's recomputation (each layer's input, or a stage's first N layers) cannot "
        "state"
    )


def _overlap_grad_reduce(args: _Args) -> bool | None:
    """True with ``--overlap-grad-reduce`` or PyTorch's DDP (buckets reduced during the last
    backward); None (the recipes' false) otherwise. PyTorch's DDP is refused beside fp32
    gradient accumulation (forced by --bf16) and the distributed optimizer, as Megatron
    asserts (6985e58 arguments.py 158-160; 285068c 167-177)."""
    if args.word("--DDP-impl") == "torch":
        for option in (
            "--bf16",
            "--accumulate-allreduce-grads-in-fp32",
            "--use-distributed-optimizer",
        ):
            if args.has(option):
                raise SpecError(f"--DDP-impl torch beside {option}: Megatron asserts local DDP")
        return True
    return True if args.has("--overlap-grad-reduce") else None


def _attention(args: _Args, recipe: Recipe) -> str | None:
    """The attention the options choose, when it is not the recipe's."""
    if args.has("--use-flash-attn"):
        chosen = Attention.FLASH
    else:
        default = "transformer_engine" if recipe.name == MEGATRON_RECIPES[-1] else "local"
        impl = args.word("--transformer-impl", default)
        backend = args.word("--attention-backend", "auto")
        if backend == "auto":
            backend = "fused" if impl == "transformer_engine" else "unfused"
        chosen = Attention.FLASH if backend in ("flash", "fused") else Attention.EAGER
    return None if chosen is recipe.attention else chosen.value


def _blocking_p2p(args: _Args, recipe: Recipe, chunks: int) -> bool | None:
    """False where Megatron overlaps the pipeline's messages (interleaving only: validate_args
    turns it off otherwise, 9dc7fef 354-359); None (the recipe's) otherwise."""
    if chunks == 1 or args.has("--no-overlap-p2p-communication"):
        return None
    if args.has("--overlap-p2p-communication") or recipe.name == MEGATRON_RECIPES[-1]:
        return False
    return None


def _scatter_gather_p2p(args: _Args, recipe: Recipe) -> bool | None:
    """False with ``--no-scatter-gather-tensors-in-pipeline`` where the recipe scatters
    (Megatron-LM before Megatron-Core: megatron/p2p_communication.py splits each message over
    the tensor-parallel ranks unless it is given, 6985e58; it does nothing under sequence
    parallelism, whose messages are 1/T already); None (the recipe's) otherwise. Megatron-Core
    keeps the option but reads it nowhere: ignored, with the reason."""
    option = "--no-scatter-gather-tensors-in-pipeline"
    if not args.has(option):
        return None
    if recipe.scatter_gather_p2p:
        return False
    args.ignore(
        option,
        f"{recipe.name} sends whole tensors: nothing reads the option since the pipeline code "
        "moved to megatron/core (3c92fa9, merged 2023-03-23)",
    )
    return None


def _tp_comm_overlap(args: _Args, recipe: Recipe, tensor: int) -> bool | None:
    """True with ``--tp-comm-overlap`` (Transformer Engine's userbuffers overlap the
    tensor-parallel all-gathers and reduce-scatters with the GEMMs); None (the recipe's)
    otherwise. Megatron asserts sequence parallelism beside it, after turning sequence
    parallelism off at T = 1 (9dc7fef arguments.py 587-593): refused without it. Only
    Transformer Engine's layers read it (megatron/core/extensions/transformer_engine.py): with
    ``--transformer-impl local`` it is ignored, with the reason."""
    option = "--tp-comm-overlap"
    if not args.has(option):
        return None
    if tensor == 1 or not args.has("--sequence-parallel"):
        at_one = ", which Megatron-LM turns off at T = 1" if tensor == 1 else ""
        raise SpecError(
            f"{option} needs --sequence-parallel{at_one}: Megatron-LM asserts it ({_CORE})"
        )
    default = "transformer_engine" if recipe.name == MEGATRON_RECIPES[-1] else "local"
    if args.word("--transformer-impl", default) == "local":
        args.ignore(
            option,
            "only Transformer Engine's layers overlap their collectives; --transformer-impl "
            "local runs them between the GEMMs",
        )
        return None
    return None if recipe.tp_comm_overlap else True


def _check_fusion(args: _Args, recipe: Recipe) -> None:
    if args.has("--no-gradient-accumulation-fusion") and recipe.fused_gradient_accumulation:
        raise SpecError(
            f"--no-gradient-accumulation-fusion under {recipe.name}, whose accumulation is "
            "fused: a run file cannot state the change (name recipe megatron-lm-2021, unfused)"
        )


# ---------------------------------------------------------------------------------------------
# Writing the arguments


def megatron_args(run: RunFile, model: Model) -> tuple[list[str], tuple[str, ...]]:
    """The Megatron-LM arguments that launch ``run`` (a plan's run: every layout field stated)
    of ``model`` (its model, resolved), and what that Megatron-LM cannot express of it, one
    line each: named, never dropped.

    The arguments are those of the Megatron-LM ``run.recipe`` names (sc21's option names for
    ``megatron-lm-2021``; ``megatron-core-2024`` when the recipe is not Megatron's, said in the
    list). The world size, T x P x D, is the launcher's (torchrun), not an argument. Data,
    tokenizer files and the learning rate are left to the user."""
    arch = model.architecture
    if arch is None:
        raise SpecError(f"model {model.name!r} is given as layers: Megatron-LM builds transformers")
    writer = _Writer(run, arch)
    trained = with_optimizer(model, run.optimizer, run.master_weights)
    dtype = run.dtype or model.dtype
    writer.architecture(arch, dtype, _stated(run.tensor_parallel, "tensor_parallel"))
    writer.precision(trained, dtype)
    writer.layout(arch)
    writer.simulation_only()
    writer.dated()
    return writer.words, tuple(writer.unexpressed)


def _core_features(run: RunFile, arch: TransformerArchitecture) -> list[str]:
    """What of ``run`` only Megatron-Core runs, each with why: ZeRO-2/3 (Megatron-FSDP),
    context and expert parallelism, mixture of experts and latent attention (Megatron-LM's
    legacy models refuse or lack them)."""
    needs = []
    if (run.zero or 0) >= 2:
        since, commit = SINCE[_MEGATRON_FSDP]
        needs.append(
            f"zero {run.zero}: Megatron-LM shards gradients and weights only with "
            f"Megatron-Core's FSDP ({_MEGATRON_FSDP}, {commit}, {since})"
        )
    legacy = "Megatron-LM's legacy models refuse it"
    if (run.context_parallel or 1) > 1:
        needs.append(f"context_parallel {run.context_parallel}: {legacy}")
    if arch.moe is not None:
        since, commit = SINCE["--moe-router-topk"]
        needs.append(
            f"mixture of experts: Megatron-Core's MoE (--moe-router-topk, {commit}, {since}); "
            "the legacy models' SwitchMLP routes top-1"
        )
    if arch.mla is not None:
        needs.append("latent attention: Megatron-LM's legacy models lack it")
    return needs


def _given(value: bool | None, default: bool) -> bool:
    return default if value is None else value


def _stated(value: int | None, field: str) -> int:
    if value is None:
        raise SpecError(f"the run must state {field} (a plan's run states every layout field)")
    return value


class _Writer:
    """The arguments of ``run``'s Megatron-LM, built up, and what it cannot express."""

    def __init__(self, run: RunFile, arch: TransformerArchitecture) -> None:
        self.run = run
        self.words: list[str] = []
        self.unexpressed: list[str] = []
        recipe = run.recipe
        if recipe not in MEGATRON_RECIPES:
            self.unexpressed.append(
                f"recipe {recipe or 'pipesim (the default)'}: Megatron-LM runs as one of "
                f"{', '.join(MEGATRON_RECIPES)}; these are megatron-core-2024's arguments"
            )
            recipe = MEGATRON_RECIPES[-1]
        elif recipe != _CORE_RECIPE and (needs := _core_features(run, arch)):
            self.to_megatron_core(recipe, needs)
            recipe = MEGATRON_RECIPES[-1]
        self.recipe_name = recipe
        self.recipe = RECIPES[recipe]
        self.start, self.end = ERAS[recipe]
        self.fp32_accumulation = False

    def to_megatron_core(self, recipe: str, needs: Sequence[str]) -> None:
        """Write a run of an older Megatron-LM that needs Megatron-Core (ZeRO-2/3, which only
        Megatron-FSDP shards; context or expert parallelism, mixture of experts and latent
        attention, which Megatron-LM's legacy models lack) as Megatron-Core's arguments, the
        older recipe's choices stated where Megatron-Core has options for them (its eager
        attention: ``--attention-backend unfused``), the rest named."""
        old, core = RECIPES[recipe], RECIPES[MEGATRON_RECIPES[-1]]
        self.unexpressed.append(
            f"recipe {recipe} with {'; '.join(needs)}; these are {core.name}'s arguments, with "
            f"{recipe}'s choices where it has options"
        )
        run = self.run
        self.run = dataclasses.replace(
            run,
            attention=run.attention or (old.attention and old.attention.value),
            overlap_grad_reduce=_given(run.overlap_grad_reduce, old.overlap_grad_reduce),
            blocking_p2p=_given(run.blocking_p2p, old.blocking_p2p),
            scatter_gather_p2p=_given(run.scatter_gather_p2p, old.scatter_gather_p2p),
            tp_comm_overlap=_given(run.tp_comm_overlap, old.tp_comm_overlap),
        )
        if old.fused_gradient_accumulation != core.fused_gradient_accumulation:
            self.cannot(
                f"{recipe}'s unfused gradient accumulation",
                f"{core.name} fuses it (and its reader refuses --no-gradient-accumulation-fusion)",
            )

    def available(self, what: str, option: str) -> bool:
        """Whether this recipe's Megatron-LM has ``option``; if not, say ``what`` is lost."""
        since, until = SINCE.get(option), UNTIL.get(option)
        if since is not None and since[0] >= self.end:
            self.cannot(
                what,
                f"Megatron-LM of {self.recipe_name} has no {option} (added in {since[1]}, "
                f"{since[0]})",
            )
            return False
        if until is not None and until[0] <= self.start:
            self.cannot(what, f"{option} was {until[2]} in {until[1]} ({until[0]})")
            return False
        return True

    def dated(self) -> None:
        """Make the arguments read back as this recipe's era: a reader without a recipe named
        dates a line by its newest option (:func:`_recipe_name`), so a Megatron-Core line whose
        options all predate 2023 (a GPT without Megatron-Core's newer options) would read as
        megatron-lm-2022, eager attention and all (found by a hostile pass, 2026-11-27).
        Megatron-Core's own ``--use-mcore-models`` (bd609d2, 2023-10-10; accepted, ignored,
        since Megatron-Core became the default) dates it."""
        present = [word for word in self.words if word in SINCE]
        newest = max((SINCE[word][0] for word in present), default="0000-00-00")
        if _era_of(newest) != self.recipe_name and self.recipe_name == MEGATRON_RECIPES[-1]:
            self.words.append("--use-mcore-models")

    def emit(self, what: str, option: str, *values: object) -> bool:
        """``option`` with ``values``, if this Megatron-LM has it; else say ``what`` is lost."""
        if not self.available(what, option):
            return False
        self.words += [option, *map(str, values)]
        return True

    def cannot(self, what: str, why: str) -> None:
        self.unexpressed.append(f"{what}: {why}")

    def architecture(self, arch: TransformerArchitecture, dtype: str, tensor: int) -> None:
        """The model's shape; the vocabulary through the tokenizer and the padding."""
        self.emit("layers", "--num-layers", arch.layers)
        self.emit("hidden", "--hidden-size", arch.hidden)
        self.emit("heads", "--num-attention-heads", arch.heads)
        self.emit("ffn", "--ffn-hidden-size", arch.ffn)
        self.emit("seq", "--seq-length", arch.seq)
        self.emit("seq", "--max-position-embeddings", arch.seq)
        if arch.key_value_heads != arch.heads:
            kv = f"kv_heads {arch.key_value_heads}"
            if self.emit(kv, "--group-query-attention"):
                self.emit(kv, "--num-query-groups", arch.key_value_heads)
        if arch.head_width is not None:
            self.emit(f"head_dim {arch.head_width}", "--kv-channels", arch.head_width)
        if arch.qk_norm:
            self.emit("qk_norm", "--qk-layernorm")
        if arch.mlp is Mlp.SWIGLU:
            self.emit("mlp swiglu", "--swiglu")
        if arch.norm is Norm.RMSNORM:
            self.emit("norm rmsnorm", "--normalization", "RMSNorm")
        if arch.position is not Position.LEARNED:
            kind = "rope" if arch.position is Position.ROPE else "none"
            self.emit(f"position {kind}", "--position-embedding-type", kind)
        if not arch.tied_embeddings:
            self.emit("untied embeddings", "--untie-embeddings-and-output-weights")
        if not arch.linear_bias:
            self.emit("no linear biases", "--disable-bias-linear")
        self.dropout(arch)
        self.vocabulary(arch.vocab, tensor)
        self.elements(arch, dtype)
        if arch.moe is not None:
            self.experts(arch, arch.moe)
        if arch.mla is not None:
            self.latent_attention(arch.mla)

    def experts(self, arch: TransformerArchitecture, moe: MixtureOfExperts) -> None:
        """Megatron-Core's mixture of experts: the experts, their routing and their blocks, and
        the alltoall dispatcher (pipesim's expert parallelism)."""
        self.emit("moe", "--num-experts", moe.experts)
        self.emit("moe", "--moe-router-topk", moe.top_k)
        self.emit("moe", "--moe-ffn-hidden-size", moe.expert_ffn)
        if moe.shared_width:
            self.emit(
                "moe shared experts", "--moe-shared-expert-intermediate-size", moe.shared_width
            )
        frequency = moe_layer_freq(moe, arch.layers)
        if frequency is not None:
            self.emit("moe blocks", "--moe-layer-freq", frequency)
        if moe.gated != (arch.mlp is Mlp.SWIGLU):
            self.cannot(
                f"moe gated {str(moe.gated).lower()} with mlp {arch.mlp.value}",
                "Megatron's experts are gated exactly when the dense MLP is (--swiglu)",
            )
        if moe.load_balancing is not LoadBalancing.AUX_LOSS:
            self.emit(
                "moe load balancing", "--moe-router-load-balancing-type", moe.load_balancing.value
            )
        if moe.capacity_factor is not None:
            if moe.load_balancing is LoadBalancing.SINKHORN:
                self.cannot(
                    f"moe capacity_factor {moe.capacity_factor:g} with sinkhorn balancing",
                    "Megatron-Core refuses a capacity factor beside Sinkhorn's balancing",
                )
            else:
                self.emit(
                    "moe capacity", "--moe-expert-capacity-factor", f"{moe.capacity_factor:g}"
                )
                if moe.pad_to_capacity:
                    self.emit("moe capacity", "--moe-pad-expert-input-to-capacity")
        if moe.max_expert_load != 1.0:
            self.cannot(
                f"moe max_expert_load {moe.max_expert_load:g}",
                "a statistic of the run's router, not an option: not written (read back, the "
                "routing is balanced)",
            )
        if moe.expert_bias:
            self.emit("moe expert bias", "--moe-router-score-function", "sigmoid")
            self.emit("moe expert bias", "--moe-router-enable-expert-bias")
        self.emit("moe", "--moe-token-dispatcher-type", "alltoall")

    def latent_attention(self, mla: MultiLatentAttention) -> None:
        """Megatron-Core's MLASelfAttention, its latents normed (--qk-layernorm)."""
        self.emit("mla", "--multi-latent-attention")
        for option, field, _ in _MLA_OPTIONS:
            value = getattr(mla, field)
            if value is not None:
                self.emit("mla", option, value)
        self.emit("mla", "--qk-layernorm")

    def dropout(self, arch: TransformerArchitecture) -> None:
        if arch.dropout != arch.embedding_dropout:
            self.cannot(
                f"dropout {arch.dropout} with embedding_dropout {arch.embedding_dropout}",
                "Megatron's embedding dropout is --hidden-dropout, the blocks' too",
            )
        elif not arch.dropout:
            self.emit("no dropout", "--attention-dropout", "0.0")
            self.emit("no dropout", "--hidden-dropout", "0.0")

    def vocabulary(self, vocab: int, tensor: int) -> None:
        """GPT-2's tokenizer with a padding that reaches ``vocab``, else NullTokenizer."""
        what = f"vocab {vocab:,}"
        multiple = _gpt2_multiple(vocab, tensor)
        if multiple is not None:  # pretrain_gpt.py's default tokenizer
            if multiple != DEFAULT_VOCAB_MULTIPLE:
                self.emit(what, "--make-vocab-size-divisible-by", multiple)
            return
        if vocab % tensor:
            self.cannot(what, f"Megatron pads it to a multiple of T = {tensor}")
            return
        if not self.available(what, "--vocab-size"):
            return
        self.emit(what, "--tokenizer-type", "NullTokenizer")
        self.emit(what, "--vocab-size", vocab - 1)  # NullTokenizer adds its end of document
        if vocab % (DEFAULT_VOCAB_MULTIPLE * tensor):
            self.emit(what, "--make-vocab-size-divisible-by", 1)

    def elements(self, arch: TransformerArchitecture, dtype: str) -> None:
        wanted = 4 if dtype == "fp32" else 2
        if arch.element_bytes != wanted:
            self.cannot(
                f"element_bytes {arch.element_bytes}",
                f"Megatron's activations under {dtype} are {wanted} bytes",
            )
        if arch.mask_bytes != 1:
            self.cannot(f"mask_bytes {arch.mask_bytes}", "PyTorch's dropout masks are bytes")
        if arch.fused_output_norm:
            self.cannot("fused_output_norm", "Megatron's final norm is a layer of its own")

    def precision(self, model: Model, dtype: str) -> None:
        """The dtype, the gradients' and master weights' bytes, the optimizer's state."""
        if dtype not in ("fp16", "bf16", "fp32"):
            self.cannot(f"dtype {dtype}", "Megatron-LM trains in fp16, bf16 or fp32")
            return
        if dtype != "fp32":
            self.emit(f"dtype {dtype}", f"--{dtype}")
        mixed = dtype != "fp32"
        self.fp32_accumulation = dtype == "bf16" or (
            dtype == "fp16" and model.gradient_bytes_per_parameter == 4.0
        )
        self.bytes_of("weight", model.weight_bytes_per_parameter, 2.0 if mixed else 4.0, dtype)
        self.gradients(model.gradient_bytes_per_parameter, dtype)
        self.bytes_of(
            "master weight", model.master_weight_bytes_per_parameter, 4.0 if mixed else 0.0, dtype
        )
        optimizer = model.optimizer_bytes_per_parameter
        if optimizer == 4.0:
            self.emit("optimizer momentum", "--optimizer", "sgd")
        elif optimizer == 0.0:
            self.emit("optimizer sgd", "--optimizer", "sgd")
            self.emit("optimizer sgd", "--sgd-momentum", "0")
        elif optimizer != 8.0:
            self.cannot(
                f"optimizer state {optimizer:g} bytes per parameter",
                "Megatron-LM's optimizers hold Adam's 8 or SGD's 4 (momentum) or 0",
            )
        if model.optimizer_temporary_bytes_per_parameter:
            self.cannot(
                f"optimizer step temporaries {model.optimizer_temporary_bytes_per_parameter:g} "
                "bytes per parameter",
                "Megatron-LM's fused optimizers step in place",
            )

    def bytes_of(self, what: str, have: float, wanted: float, dtype: str) -> None:
        if have != wanted:
            self.cannot(f"{have:g} {what} bytes per parameter", f"Megatron's {dtype}: {wanted:g}")

    def gradients(self, have: float, dtype: str) -> None:
        if dtype == "fp16" and have == 4.0:
            self.emit("fp32 gradients", "--accumulate-allreduce-grads-in-fp32")
        elif dtype == "bf16" and have == 2.0:
            self.emit("bf16 gradients", "--grad-reduce-in-bf16")
        else:
            self.bytes_of("gradient", have, {"fp16": 2.0}.get(dtype, 4.0), dtype)

    def layout(self, arch: TransformerArchitecture) -> None:
        """Parallel sizes, batch, schedule, partition, recomputation, communication."""
        run = self.run
        tensor = _stated(run.tensor_parallel, "tensor_parallel")
        pipeline = _stated(run.pipeline_parallel, "pipeline_parallel")
        data = _stated(run.data_parallel, "data_parallel")
        micro = _stated(run.microbatch_size, "microbatch_size")
        microbatches = run.microbatches
        if microbatches is None and run.batch is not None and run.batch % (micro * data) == 0:
            microbatches = run.batch // (micro * data)
        batch = micro * _stated(microbatches, "microbatches") * data
        if run.batch is not None and run.batch != batch:
            raise SpecError(
                f"the run's batch {run.batch} is not microbatch_size x microbatches x "
                f"data_parallel = {batch}"
            )
        self.emit("tensor_parallel", "--tensor-model-parallel-size", tensor)
        self.emit("pipeline_parallel", "--pipeline-model-parallel-size", pipeline)
        self.context(arch)
        self.expert(arch, data)
        self.emit("microbatch_size", "--micro-batch-size", micro)
        self.emit("batch", "--global-batch-size", batch)
        chunks = self.schedule(arch.layers, pipeline)
        self.partition(arch.layers, pipeline, chunks)
        self.recompute(arch.layers, pipeline)
        if run.sequence_parallel:
            self.emit("sequence_parallel", "--sequence-parallel")
        self.sharding(pipeline)
        self.offload(arch, pipeline)
        self.communication(chunks)

    def context(self, arch: TransformerArchitecture) -> None:
        """Context parallelism: CP, and all_gather where the run's exchange is (p2p is
        Megatron's default)."""
        run = self.run
        context = run.context_parallel or 1
        comm = run.cp_comm_type or "p2p"
        if context == 1:
            if comm != "p2p":
                self.cannot(
                    f"cp_comm_type {comm} without context parallelism",
                    "nothing is exchanged; not written",
                )
            return
        what = f"context_parallel {context}"
        if arch.seq % (2 * context):
            self.cannot(what, f"Megatron asserts the sequence ({arch.seq}) a multiple of 2 x CP")
        if not self.emit(what, "--context-parallel-size", context):
            return
        if run.cp_comm_type in _CP_COMM.values():  # p2p too where the run states it
            kind = next(key for key, value in _CP_COMM.items() if value == run.cp_comm_type)
            self.emit(f"cp_comm_type {comm}", "--cp-comm-type", kind)
        elif run.cp_comm_type is not None:
            self.cannot(f"cp_comm_type {comm}", "not p2p or all-gather; Megatron's p2p written")

    def expert(self, arch: TransformerArchitecture, data: int) -> None:
        """Expert parallelism over EP of the D x CP ranks (Megatron's expert groups, ETP = T),
        or folded with an expert tensor-parallel size of its own (:meth:`expert_tensor`)."""
        self.expert_tensor(arch)
        expert = self.run.expert_parallel or 1
        if expert == 1:
            return
        what = f"expert_parallel {expert}"
        if arch.moe is None:
            self.cannot(what, "the model has no experts (Megatron asserts --num-experts)")
            return
        if arch.moe.experts % expert:
            self.cannot(what, f"Megatron asserts it divides the {arch.moe.experts} experts")
        tensor, context = self.run.tensor_parallel or 1, self.run.context_parallel or 1
        expert_tensor = self.run.expert_tensor_parallel or tensor
        if (tensor * data * context) % (expert * expert_tensor):
            self.cannot(what, "Megatron's expert groups need ETP x EP to divide T x CP x D")
        self.emit(what, "--expert-model-parallel-size", expert)

    def expert_tensor(self, arch: TransformerArchitecture) -> None:
        """``--expert-tensor-parallel-size`` where the run states one other than T."""
        tensor = self.run.tensor_parallel or 1
        expert_tensor = self.run.expert_tensor_parallel
        if expert_tensor is None or expert_tensor == tensor:
            return
        what = f"expert_tensor_parallel {expert_tensor}"
        if arch.moe is None:
            self.cannot(what, "the model has no experts (Megatron reads it with --num-experts)")
            return
        if arch.moe.expert_ffn % expert_tensor:
            self.cannot(what, "Megatron's divide() needs it to divide --moe-ffn-hidden-size")
        if tensor > 1 and not self.run.sequence_parallel:
            self.cannot(what, "Megatron-Core's MoELayer needs --sequence-parallel beside T > 1")
        self.emit(what, "--expert-tensor-parallel-size", expert_tensor)

    def offload(self, arch: TransformerArchitecture, pipeline: int) -> None:
        """Activation offloading of the first N layers (``--cpu-offloading-num-layers``), with
        Megatron-Core's refusals: no pipeline, no recomputation, N below the layers."""
        layers = self.run.offload_activations or 0
        if not layers:
            return
        what = f"offload_activations {layers}"
        if pipeline > 1:
            self.cannot(what, "Megatron-Core has no CPU offloading with a pipeline")
        elif (self.run.recompute or "none") != "none":
            self.cannot(what, "Megatron-Core has no CPU offloading with recomputation")
        elif layers >= arch.layers:
            self.cannot(what, f"Megatron-Core offloads fewer than its {arch.layers} layers")
        else:
            self.emit(what, "--cpu-offloading-num-layers", layers)

    def sharding(self, pipeline: int) -> None:
        """ZeRO-1 as the distributed optimizer; ZeRO-2 and -3 as Megatron-FSDP (optim_grads,
        optim_grads_params), beside the distributed optimizer and the checkpoint format it
        asserts, as Megatron's own examples give it (examples/megatron_fsdp)."""
        zero = self.run.zero or 0
        policy = self.run.reshard_after_forward or ReshardPolicy.DEFAULT.value
        if policy not in {p.value for p in ReshardPolicy}:
            self.cannot(f"reshard_after_forward {policy}", "not default, always or never")
            policy = ReshardPolicy.DEFAULT.value
        if zero != 3 and policy != ReshardPolicy.DEFAULT.value:
            self.cannot(f"reshard_after_forward {policy}", "FSDP's alone (zero 3); not written")
        if zero == 1:
            self.emit("zero 1", "--use-distributed-optimizer")
        if zero not in (2, 3):
            return
        what = f"zero {zero}"
        if not self.available(what, _MEGATRON_FSDP):
            return
        strategy = next(name for name, stage in SHARDING_STRATEGIES.items() if stage == zero)
        self.words += ["--use-distributed-optimizer", _MEGATRON_FSDP, _STRATEGY, strategy]
        self.words += ["--ckpt-format", "fsdp_dtensor"]
        if pipeline > 1:
            self.cannot(
                f"{what} in a pipeline of {pipeline}",
                "Megatron-FSDP reduce-scatters every micro-batch's gradients inside the pipeline "
                "too, where pipesim's run holds them whole until the step's last backward; "
                f"written with {_MEGATRON_FSDP} all the same (pipesim does not read it back)",
            )
        if zero == 3 and not ReshardPolicy(policy).reshards(pipeline > 1):
            self.cannot(
                f"reshard_after_forward {policy}",
                "Megatron-FSDP frees each layer's gathered weights after its forward (only "
                f"{_TORCH_FSDP2} --torch-fsdp2-no-reshard-after-forward keeps them, and it "
                "asserts unfused gradient accumulation, which megatron-core-2024 fuses)",
            )

    def schedule(self, layers: int, pipeline: int) -> int:
        """The schedule; the chunks v Megatron runs (1 when it cannot run the run's)."""
        name = self.run.schedule or "1f1b"
        chunks = self.run.chunks or 1
        if name == "1f1b" and chunks == 1:
            return 1
        if name == "interleaved-1f1b" and chunks > 1:
            least = 3 if self.blocking() else 2
            if pipeline < least:
                self.cannot(
                    f"interleaved-1f1b on {pipeline} devices",
                    f"Megatron's interleaved schedule asserts P >= {least} ({_SC21}; {_CORE})",
                )
                return 1
            if layers % (pipeline * chunks) == 0:
                self.emit(
                    f"interleaved-1f1b with {chunks} chunks",
                    "--num-layers-per-virtual-pipeline-stage",
                    layers // (pipeline * chunks),
                )
                return chunks
            self.cannot(
                f"{chunks} chunks",
                f"Megatron's chunks hold layers / (P x v) blocks each; {layers} / "
                f"({pipeline} x {chunks}) is not whole",
            )
            return 1
        self.cannot(
            f"schedule {name} with {chunks} chunks",
            "Megatron-LM runs 1F1B and interleaved 1F1B only "
            "(megatron/core/pipeline_parallel/schedules.py)",
        )
        return 1

    def partition(self, layers: int, pipeline: int, chunks: int) -> None:
        text = self.run.partition
        if text is None or text == "blocks":
            if layers % pipeline:
                self.cannot(f"{layers} layers on {pipeline} stages", "Megatron needs L % P == 0")
            return
        try:
            counts = tuple(int(part) for part in text.split(","))
        except ValueError:
            self.cannot(f"partition {text}", "Megatron splits the blocks evenly over the stages")
            return
        if layers % pipeline == 0 and counts == _even(layers, pipeline, chunks):
            return
        if chunks == 1 and pipeline > 1 and sum(counts) == layers + 2 and len(counts) == pipeline:
            first, last = counts[0] - 1, counts[-1] - 1
            middle = set(counts[1:-1]) or {(layers - first - last)}
            if (
                len(middle) == 1
                and (n := middle.pop()) >= 0
                and first + last + n * (pipeline - 2) == layers
            ):
                if first != n and not self.emit(
                    f"partition {text}", "--decoder-first-pipeline-num-layers", first
                ):
                    return
                if last != n:
                    self.emit(f"partition {text}", "--decoder-last-pipeline-num-layers", last)
                return
        self.cannot(
            f"partition {text}",
            "Megatron splits the blocks evenly over the stages (the first and last stage's "
            "count apart, without interleaving)",
        )

    def recompute(self, layers: int, pipeline: int) -> None:
        try:
            recompute = Recompute.parse(self.run.recompute or "none")
        except SpecError as error:
            self.cannot(f"recompute {self.run.recompute}", str(error))
            return
        label = f"recompute {recompute.label}"
        if recompute.mode is RecomputeMode.NONE:
            return
        if recompute.mode is RecomputeMode.SELECTIVE:
            self.emit(label, "--recompute-activations")
            return
        method = "uniform" if recompute.layers_per_stage is None else "block"
        count = recompute.layers_per_stage or 1
        if self.recipe_name == MEGATRON_RECIPES[0]:
            self.emit(label, "--activations-checkpoint-method", method)
            if count != 1:
                self.emit(label, "--activations-checkpoint-num-layers", count)
            return
        if count > layers // pipeline:
            self.cannot(label, f"Megatron-Core takes at most layers / P = {layers // pipeline}")
            return
        self.emit(label, "--recompute-granularity", "full")
        self.emit(label, "--recompute-method", method)
        self.emit(label, "--recompute-num-layers", count)

    def blocking(self) -> bool:
        """Whether the run's pipeline messages block (its own choice, or its recipe's)."""
        run = self.run
        return self.recipe.blocking_p2p if run.blocking_p2p is None else run.blocking_p2p

    def communication(self, chunks: int) -> None:
        """The gradient reduce's overlap, the pipeline messages, the attention."""
        run, recipe = self.run, self.recipe
        if run.overlap_grad_reduce and not recipe.overlap_grad_reduce:
            if self.recipe_name == MEGATRON_RECIPES[-1]:
                self.emit("overlap_grad_reduce", "--overlap-grad-reduce")
            elif self.fp32_accumulation or run.zero:
                self.cannot(
                    "overlap_grad_reduce",
                    f"Megatron-LM of {self.recipe_name} overlaps it with PyTorch's DDP only, "
                    "which it refuses beside fp32 gradients and the distributed optimizer",
                )
            else:
                self.emit("overlap_grad_reduce", "--DDP-impl", "torch")
        blocking = self.blocking()
        if self.recipe_name == MEGATRON_RECIPES[-1] and chunks > 1:
            if blocking:
                self.emit("blocking_p2p", "--no-overlap-p2p-communication")
        elif not blocking:
            self.cannot(
                "blocking_p2p false",
                f"Megatron-LM of {self.recipe_name} waits for the pipeline's messages here "
                "(it overlaps them in Megatron-Core's interleaved schedule only)",
            )
        self.scatter_gather()
        self.tensor_overlap()
        try:
            attention = Attention(run.attention) if run.attention else recipe.attention
        except ValueError:
            self.cannot(f"attention {run.attention}", "pipesim knows eager and flash")
            return
        if attention is recipe.attention:
            return
        if attention is Attention.FLASH:
            self.emit("attention flash", "--use-flash-attn")
        else:
            self.emit("attention eager", "--attention-backend", "unfused")

    def scatter_gather(self) -> None:
        """Megatron-LM's scatter/gather of pipeline messages: on before Megatron-Core, with an
        opt-out; Megatron-Core has none."""
        run, recipe = self.run, self.recipe
        if run.scatter_gather_p2p is None or run.scatter_gather_p2p == recipe.scatter_gather_p2p:
            return
        if recipe.scatter_gather_p2p:
            self.emit("scatter_gather_p2p false", "--no-scatter-gather-tensors-in-pipeline")
        else:
            self.cannot(
                "scatter_gather_p2p true",
                f"Megatron-LM of {self.recipe_name} sends whole tensors (no scatter/gather since "
                "the pipeline code moved to megatron/core, 3c92fa9, 2023-03-23)",
            )

    def tensor_overlap(self) -> None:
        """Transformer Engine's overlap of the tensor-parallel collectives with the GEMMs."""
        run, recipe = self.run, self.recipe
        if not run.tp_comm_overlap or recipe.tp_comm_overlap:
            return
        if not self.available("tp_comm_overlap", "--tp-comm-overlap"):
            return
        if not run.sequence_parallel or (run.tensor_parallel or 1) == 1:
            self.cannot(
                "tp_comm_overlap",
                "Megatron-LM asserts --sequence-parallel beside --tp-comm-overlap (and turns "
                f"sequence parallelism off at T = 1; {_CORE})",
            )
            return
        self.emit("tp_comm_overlap", "--tp-comm-overlap")

    def simulation_only(self) -> None:
        """pipesim's own settings: no Megatron-LM option states them."""
        for attribute in (
            "remat",
            "memory_limit",
            "steps",
            "tensor_across_nodes",
            "memory_reserve",
            "fragmentation",
        ):
            value = getattr(self.run, attribute)
            if value is None or value is False:
                continue
            self.cannot(f"{attribute} = {value}", "pipesim's own setting, no Megatron-LM option")


def moe_layer_freq(moe: MixtureOfExperts, layers: int) -> str | None:
    """``--moe-layer-freq`` for ``moe``'s blocks: None (Megatron's default 1, every block), N
    (block i when i % N == 0), or Megatron's list form: ``([0]*k+[1]*(L-k))`` after k dense
    blocks, the blocks' 0s and 1s otherwise."""
    first, frequency = moe.first_dense_layers, moe.layer_frequency
    if first == 0:
        return None if frequency == 1 else str(frequency)
    if frequency == 1:
        return f"([0]*{first}+[1]*{layers - first})"
    return "[" + ",".join("1" if moe.is_moe_layer(i) else "0" for i in range(layers)) + "]"


def _even(layers: int, pipeline: int, chunks: int) -> tuple[int, ...] | None:
    if layers % (pipeline * chunks):
        return None
    return megatron_partition(layers, pipeline, chunks)


def _gpt2_multiple(vocab: int, tensor: int) -> int | None:
    """The smallest ``--make-vocab-size-divisible-by`` that pads GPT-2's vocabulary to
    ``vocab`` at T (the default 128 first), or None when none does below twice GPT-2's."""
    if padded_vocab(GPT2_VOCAB, DEFAULT_VOCAB_MULTIPLE, tensor) == vocab:
        return DEFAULT_VOCAB_MULTIPLE
    if not GPT2_VOCAB <= vocab < 2 * GPT2_VOCAB or vocab % tensor:
        return None
    # the padding step m x T divides vocab and exceeds vocab - 50,257
    for multiple in range((vocab - GPT2_VOCAB) // tensor + 1, vocab // tensor + 1):
        if padded_vocab(GPT2_VOCAB, multiple, tensor) == vocab:
            return multiple
    return None
