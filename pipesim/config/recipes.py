"""The named recipes: the frameworks and eras the reproductions and users name, each choice cited.

A citation names a file at a commit or date, a paper's section, or a measurement. Where a
framework leaves a choice to its user (Megatron-LM's ``--overlap-grad-reduce``), the recipe
takes the framework's default and the source says so; a run that chose otherwise names the
recipe with that choice changed (:meth:`~pipesim.config.recipe.Recipe.with_choices`).
"""

from __future__ import annotations

from types import MappingProxyType

from pipesim.common.checks import SpecError
from pipesim.config.recipe import CHOICES, Recipe
from pipesim.errors import named
from pipesim.workload.architecture import Attention

# The zero-bubble paper profiled one activation message between A100 pipeline stages in
# Megatron-LM (arXiv 2401.10241, Table 6: 0.38 to 0.76 ms for 10.5 to 28.3 MB); against the
# message size its intercept is 0.25 ms: the cost of a message besides its bytes (the send and
# receive calls and their synchronisation). The GPU entries of the hardware catalogue carry
# the same figure as their ``message_overhead_s``.
MEGATRON_MESSAGE_OVERHEAD_S = 0.25e-3

_MEGATRON_OVERHEAD_SOURCE = (
    "arXiv 2401.10241 Table 6 (Megatron-LM on A100): the 0.25 ms intercept of message time "
    "against size"
)

PIPESIM = Recipe(
    "pipesim",
    "the simulator's assumptions where no framework is named: messages overlap compute, "
    "gradient accumulation fused, the gradient reduce after the backward",
    blocking_p2p=False,
    fused_gradient_accumulation=True,
    overlap_grad_reduce=False,
    attention=None,
    message_overhead_s=None,
    sources={
        "blocking_p2p": "PyTorch's torch/distributed/pipelining/schedules.py (pytorch/pytorch "
        "00722e6): sends and receives posted with dist.batch_isend_irecv, a receive waited "
        "right before the action that reads it, a send later",
        "fused_gradient_accumulation": "Megatron-LM's default since 2022-02-22 (83b1e42, "
        "merged 9c5a830: --no-gradient-accumulation-fusion is the opt-out)",
        "overlap_grad_reduce": "off unless asked for: Megatron-LM's --overlap-grad-reduce is "
        "store_true, default False (2d5220a, 2023-09-07, unchanged since)",
        "attention": "as the model's architecture says (the catalogue's Llama models: flash)",
        "message_overhead_s": "as the hardware spec says (the catalogue's GPU entries: 0.25 ms, "
        "the zero-bubble paper's Megatron-LM profile)",
    },
)

MEGATRON_LM_2021 = Recipe(
    "megatron-lm-2021",
    "Megatron-LM as the SC21 paper's runs used it (arXiv 2104.04473, examples/sc21): blocking "
    "messages, unfused accumulation, eager attention, the local DDP's reduce after the backward",
    blocking_p2p=True,
    fused_gradient_accumulation=False,
    overlap_grad_reduce=False,
    attention=Attention.EAGER,
    message_overhead_s=MEGATRON_MESSAGE_OVERHEAD_S,
    sources={
        "blocking_p2p": "megatron/p2p_communication.py at de7dc40 (the sc21 scripts, merged "
        "e269e20, 2021-08-10), lines 126-130: batch_isend_irecv, every request waited, then "
        "torch.cuda.synchronize()",
        "fused_gradient_accumulation": "gradient-accumulation fusion came after: authored "
        "2022-02-13, merged 2022-02-22 (83b1e42, 9c5a830); before it each weight gradient was "
        "added to main_grad by a pass of its own",
        "overlap_grad_reduce": "--DDP-impl default 'local' (megatron/arguments.py at e269e20): "
        "one all-reduce of the gradient buffer after all micro-batches' backward "
        "(megatron/training.py lines 366-369); examples/sc21/run_table_1.sh uses DDP=local for "
        "every pipelined run and DDP=torch (PyTorch's DDP, overlapping) for the PP=1 ones",
        "attention": "flash attention came later: --use-flash-attn merged 2023-01-11 (285068c); "
        "FlashAttention itself is of May 2022 (arXiv 2205.14135)",
        "message_overhead_s": _MEGATRON_OVERHEAD_SOURCE,
    },
)

MEGATRON_LM_2022 = Recipe(
    "megatron-lm-2022",
    "Megatron-LM as the sequence-parallelism paper's runs used it (arXiv 2205.05198): blocking "
    "messages, fused accumulation, eager attention, the reduce after the backward",
    blocking_p2p=True,
    fused_gradient_accumulation=True,
    overlap_grad_reduce=False,
    attention=Attention.EAGER,
    message_overhead_s=MEGATRON_MESSAGE_OVERHEAD_S,
    sources={
        "blocking_p2p": "megatron/p2p_communication.py kept its waited batch_isend_irecv and "
        "torch.cuda.synchronize() until the pipeline code moved to megatron/core (3c92fa9, "
        "2023-03-23) and gained --overlap-p2p-communication (f9283c5, 2023-05-31)",
        "fused_gradient_accumulation": "gradient-accumulation fusion on by default from "
        "2022-02-22 (83b1e42, merged 9c5a830), before the paper's runs (May 2022)",
        "overlap_grad_reduce": "--DDP-impl local, the default (megatron/arguments.py): one "
        "all-reduce after the backward; --overlap-grad-reduce came in 2023 (2d5220a)",
        "attention": "--use-flash-attn merged 2023-01-11 (285068c), after the paper: its "
        "selective recomputation exists because the scores were stored",
        "message_overhead_s": _MEGATRON_OVERHEAD_SOURCE,
    },
)

MEGATRON_CORE_2024 = Recipe(
    "megatron-core-2024",
    "Megatron-Core of 2024 with its defaults: messages waited where posted, fused accumulation, "
    "Transformer Engine's fused attention, the gradient reduce after the backward",
    blocking_p2p=True,
    fused_gradient_accumulation=True,
    overlap_grad_reduce=False,
    attention=Attention.FLASH,
    message_overhead_s=MEGATRON_MESSAGE_OVERHEAD_S,
    sources={
        "blocking_p2p": "megatron/core/pipeline_parallel/p2p_communication.py: "
        "wait_on_reqs=(not overlap_p2p_comm); overlap_p2p_comm serves the interleaved "
        "schedule only (f9283c5, merged 2023-05-31) and megatron/training/arguments.py turns "
        "it off for every other schedule, so 1F1B's messages are waited where posted (later "
        "versions overlap the interleaved schedule's by default, --no-overlap-p2p-communication: "
        "a choice this recipe does not split by schedule)",
        "fused_gradient_accumulation": "on by default since 2022-02-22 (83b1e42, merged "
        "9c5a830); megatron/training/arguments.py keeps only the opt-out flag",
        "overlap_grad_reduce": "--overlap-grad-reduce, store_true with default False at "
        "2024-12 (9dc7fef) as when added (2d5220a, 2023-09-07): the framework's default",
        "attention": "--transformer-impl default transformer_engine since 2024-04-03 (e7b74a4, "
        "merged afa3318): TEDotProductAttention, flash or cuDNN fused attention",
        "message_overhead_s": _MEGATRON_OVERHEAD_SOURCE,
    },
)

DEEPSPEED_PIPE = Recipe(
    "deepspeed-pipe",
    "DeepSpeed's pipeline engine (deepspeed/runtime/pipe): blocking sends and receives, "
    "autograd's accumulation, the gradient reduce after the last micro-batch",
    blocking_p2p=True,
    fused_gradient_accumulation=False,
    overlap_grad_reduce=False,
    attention=None,
    message_overhead_s=None,
    sources={
        "blocking_p2p": "deepspeed/runtime/pipe/p2p.py (microsoft/DeepSpeed 38327e0) lines "
        "46-64: async_op refused, dist.send/dist.recv (a synchronous broadcast in 2021, "
        "1ff2574)",
        "fused_gradient_accumulation": "deepspeed/runtime/pipe/engine.py lines 860-866: "
        "torch.autograd.backward accumulates into .grad; no fused accumulation in the tree",
        "overlap_grad_reduce": "deepspeed/runtime/pipe/schedule.py lines 33-36: ReduceGrads "
        "after the last micro-batch; engine.py lines 80-81 disable the backward's all-reduce",
        "attention": "as the model's architecture says (the engine prescribes none)",
        "message_overhead_s": "as the hardware spec says (no measurement of DeepSpeed's)",
    },
)

TORCHTITAN = Recipe(
    "torchtitan",
    "torchtitan on torch.distributed.pipelining: overlapped messages, autograd's "
    "accumulation, FSDP's reduce once after the last micro-batch, SDPA attention",
    blocking_p2p=False,
    fused_gradient_accumulation=False,
    overlap_grad_reduce=False,
    attention=Attention.FLASH,
    message_overhead_s=None,
    sources={
        "blocking_p2p": "torch/distributed/pipelining/schedules.py (pytorch/pytorch 00722e6): "
        "dist.batch_isend_irecv, a receive waited right before the compute that reads it",
        "fused_gradient_accumulation": "plain autograd: torchtitan/train.py lines 413-431 call "
        "loss.backward() per micro-batch; no fused accumulation",
        "overlap_grad_reduce": "torch/distributed/pipelining/stage.py (0138610): "
        "set_requires_gradient_sync(False) for every micro-batch, one reduction in "
        "_post_backward after the last",
        "attention": "torchtitan/models/attention.py lines 195-214 (8004fef): "
        "scaled_dot_product_attention, FLASH_ATTENTION first",
        "message_overhead_s": "as the hardware spec says (no measurement of torchtitan's)",
    },
)

DEFAULT_RECIPE = PIPESIM

RECIPES: MappingProxyType[str, Recipe] = MappingProxyType(
    {
        recipe.name: recipe
        for recipe in (
            PIPESIM,
            MEGATRON_LM_2021,
            MEGATRON_LM_2022,
            MEGATRON_CORE_2024,
            DEEPSPEED_PIPE,
            TORCHTITAN,
        )
    }
)

for _recipe in RECIPES.values():  # every choice of every named recipe says where it comes from
    assert set(_recipe.sources) == set(CHOICES), _recipe.name


def named_recipe(name: str) -> Recipe:
    """The named recipe; an unknown name lists the known ones."""
    try:
        return RECIPES[name]
    except (KeyError, TypeError):
        raise SpecError(
            f"{named('recipe')} must be one of {', '.join(RECIPES)}, got {name!r}"
        ) from None
