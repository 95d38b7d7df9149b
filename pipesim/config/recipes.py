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
# message size its least-squares intercept is 0.24 ms (0.237): the cost of a message besides its
# bytes (the send and receive calls and their synchronisation). The GPU entries of the hardware
# catalogue carry the same figure as their ``message_overhead_s``.
# provenance: docs/measurements/cited/zero-bubble-2401.10241-table6.json (FITTED, not measured;
# IN-SAMPLE for the zero-bubble reproduction's T_comm rows; 0.25 ms until 2026-11-27, which no
# fit of the record gives)
MEGATRON_MESSAGE_OVERHEAD_S = 0.24e-3

_MEGATRON_OVERHEAD_SOURCE = (
    "arXiv 2401.10241 Table 6 (Megatron-LM on A100): the 0.24 ms least-squares intercept of "
    "message time against size (fitted)"
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
    scatter_gather_p2p=True,
    tp_comm_overlap=False,
    sources={
        "blocking_p2p": "PyTorch's torch/distributed/pipelining/schedules.py (pytorch/pytorch "
        "00722e6): sends and receives posted with dist.batch_isend_irecv, a receive waited "
        "right before the action that reads it, a send later",
        "fused_gradient_accumulation": "Megatron-LM's default since 2022-02-22 (83b1e42, "
        "merged 9c5a830: --no-gradient-accumulation-fusion is the opt-out)",
        "overlap_grad_reduce": "off unless asked for: Megatron-LM's --overlap-grad-reduce is "
        "store_true, default False (2d5220a, 2023-09-07, unchanged since)",
        "attention": "as the model's architecture says (the catalogue's Llama models: flash)",
        "message_overhead_s": "as the hardware spec says (the catalogue's GPU entries: 0.24 ms, "
        "the zero-bubble paper's Megatron-LM profile)",
        "scatter_gather_p2p": "Megatron-LM's scatter/gather, as the simulator has always "
        "priced messages under tensor parallelism (1/T per rank, then an all-gather)",
        "tp_comm_overlap": "off: a tensor-parallel collective waits for the GEMM before it "
        "and delays the one after, as without Transformer Engine's userbuffers",
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
    scatter_gather_p2p=True,
    tp_comm_overlap=False,
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
        "scatter_gather_p2p": "megatron/arguments.py at e269e20: "
        "--no-scatter-gather-tensors-in-pipeline is the opt-out (store_false), so on by "
        "default; megatron/p2p_communication.py splits each message into 1/T chunks "
        "(split_tensor_into_1d_equal_chunks) and gathers them (gather_split_1d_tensor)",
        "tp_comm_overlap": "megatron/mpu/mappings.py at e269e20: the "
        "all-reduce runs between the GEMMs on the compute stream; the GEMM overlap "
        "(--tp-comm-overlap) came with Transformer Engine's userbuffers (116ffdd, 2023-10-23)",
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
    scatter_gather_p2p=True,
    tp_comm_overlap=False,
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
        "scatter_gather_p2p": "on by default until the pipeline code "
        "moved to megatron/core (39b83c7, 2023-01-31), which sends the whole tensor",
        "tp_comm_overlap": "no overlap before 116ffdd (2023-10-23), which "
        "added --tp-comm-overlap (Transformer Engine's userbuffers)",
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
    scatter_gather_p2p=False,
    tp_comm_overlap=False,
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
        "scatter_gather_p2p": "megatron/core/pipeline_parallel/"
        "p2p_communication.py has no scatter/gather since the move to core (39b83c7, "
        "2023-01-31, removed split_tensor_into_1d_equal_chunks from the path): each tensor-"
        "parallel rank sends the whole tensor (with sequence parallelism it is 1/T already)",
        "tp_comm_overlap": "--tp-comm-overlap, store_true with default "
        "False (megatron/training/arguments.py at 9dc7fef, 2024-12): the framework's default",
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
    scatter_gather_p2p=False,
    tp_comm_overlap=False,
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
        "scatter_gather_p2p": "deepspeed/runtime/pipe/engine.py "
        "(0457bb1, 2021-09) _exec_send_activations: p2p.send of each output tensor whole to "
        "the next stage's rank; nothing is split over the tensor-parallel ranks",
        "tp_comm_overlap": "Megatron-DeepSpeed's tensor-parallel layers "
        "are Megatron-LM's of 2020-2021 (all-reduce between the GEMMs); the GEMM overlap came "
        "to Megatron in 2023 (116ffdd)",
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
    scatter_gather_p2p=False,
    tp_comm_overlap=False,
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
        "scatter_gather_p2p": "torch/distributed/pipelining/stage.py "
        "sends a stage's output tensors as they are (no split over tensor-parallel ranks; "
        "with sequence parallelism they are the sequence's 1/T)",
        "tp_comm_overlap": "off unless asked for: torchtitan's asynchronous "
        "tensor parallelism (torch.compile's micro-pipelining) is an opt-in job setting",
    },
)

# NeMo's own configurations of 2024 (the DGX Cloud benchmark recipes, NVIDIA/dgxc-benchmarking
# nemo_megatron/gpt3_175b_hydra.yaml at 35a9aec, NeMo 24.12 on Megatron-Core): they turn on
# what Megatron-Core leaves to its user.
_NEMO_YAML = "NVIDIA/dgxc-benchmarking nemo_megatron/gpt3_175b_hydra.yaml (35a9aec, NeMo 24.12)"

NEMO_2024 = Recipe(
    "nemo-2024",
    "NeMo's 2024 recipes on Megatron-Core and Transformer Engine: overlapped pipeline messages, "
    "fused accumulation, the gradient reduce overlapping the backward, fused attention, "
    "tensor-parallel collectives overlapping the GEMMs",
    blocking_p2p=False,
    fused_gradient_accumulation=True,
    overlap_grad_reduce=True,
    attention=Attention.FLASH,
    message_overhead_s=None,
    scatter_gather_p2p=False,
    tp_comm_overlap=True,
    sources={
        "blocking_p2p": f"{_NEMO_YAML}: overlap_p2p_comm: true, batch_p2p_comm: false (the "
        "interleaved schedule's sends and receives overlap compute)",
        "fused_gradient_accumulation": f"{_NEMO_YAML}: gradient_accumulation_fusion: true",
        "overlap_grad_reduce": f"{_NEMO_YAML}: optim distributed_fused_adam with "
        "overlap_grad_sync: true, overlap_param_sync: true",
        "attention": f"{_NEMO_YAML}: mcore_gpt: true, transformer_engine: true (Transformer "
        "Engine's fused attention)",
        "message_overhead_s": "as the hardware spec says (no measurement of NeMo's)",
        "scatter_gather_p2p": "Megatron-Core's p2p_communication.py sends whole tensors "
        "(no scatter/gather since 39b83c7); the recipes run sequence_parallel: true",
        "tp_comm_overlap": f"{_NEMO_YAML}: ub_tp_comm_overlap: true (userbuffers: bulk and "
        "ring-exchange overlap of the all-gathers and reduce-scatters with the GEMMs)",
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
            NEMO_2024,
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
