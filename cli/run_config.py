"""The command line's one reading of a run's configuration: ``--model``, ``--hardware``, the
optimizer and precision flags, the parallel flags and the recipe (``--recipe`` with its
``--overlap-grad-reduce``, ``--attention``, ``--blocking-p2p``, ``--scatter-gather-p2p`` and
``--tp-comm-overlap`` changes), into a :class:`~pipesim.config.run_config.RunConfig`, checked
whole before any work.

``simulate``, ``sweep`` and ``plan`` build theirs here, so the same flags mean the same run
everywhere; a configuration that sets something no cost reads is warned about on stderr, once.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipesim.config import DEFAULT_RECIPE, RECIPES
from pipesim.errors import PipesimError

if TYPE_CHECKING:  # the run's configuration loads the models and the hardware: when one is read
    from pipesim.config import RunConfig
    from pipesim.parallel.config import ContextComm
    from pipesim.parallel.sharding import ReshardPolicy

# The recipe's true-or-false choices a flag of the command line turns on (its --no- form undoes
# only a true given before it, a run file's: it never turns a recipe's own choice off). plan
# takes the first only.
RECIPE_SWITCHES = ("overlap_grad_reduce", "blocking_p2p", "scatter_gather_p2p", "tp_comm_overlap")


def add_recipe_argument(parser: argparse.ArgumentParser | Any) -> None:
    """``--recipe NAME``: the software the run assumes (``pipesim recipes list``)."""
    parser.add_argument(
        "--recipe",
        metavar="NAME",
        help="the training software's behaviour: "
        + ", ".join(RECIPES)
        + f" (default {DEFAULT_RECIPE.name}; pipesim recipes list shows each choice and its "
        "source); a flag for one of its choices (--attention, --overlap-grad-reduce) changes "
        "that choice",
    )


def run_config_of(args: argparse.Namespace, data_parallel: int | None = None) -> RunConfig:
    """The run ``--model`` and ``--hardware`` (names or TOML files) describe with the optimizer,
    master weights, dtype, memory allowances, the parallel layout (``--tensor-parallel``,
    ``--sequence-parallel``, ``--recompute``, ``--zero`` and ``data_parallel`` replicas; None:
    a plan's, which the search chooses) and the recipe asked for (``--recipe`` with the
    choices its flags change). Every flag is read first, then the library resolves and checks
    the whole; what the run sets that no cost reads is warned about on stderr."""
    from pipesim.config import RunConfig, named_recipe
    from pipesim.hardware import resolve_hardware
    from pipesim.parallel.config import IDENTITY, Parallelism, Recompute
    from pipesim.request.cost_request import resolved_model, with_allowances
    from pipesim.workload.sharding import attention_kind

    flags = _RunFlags.of(args, data_parallel)
    model = resolved_model(
        flags.model, flags.optimizer, flags.master_weights, flags.dtype, flags.seq_length
    )
    hardware = with_allowances(
        resolve_hardware(flags.hardware), flags.memory_reserve, flags.fragmentation
    )
    parallelism = IDENTITY
    if flags.data is not None:
        parallelism = Parallelism(
            tensor=flags.tensor,
            sequence_parallel=flags.sequence_parallel,
            recompute=Recompute.parse(flags.recompute),
            zero=flags.zero,
            data=flags.data,
            reshard_after_forward=_reshard_policy(flags.reshard_after_forward),
            context=flags.context,
            expert=flags.expert,
            expert_tensor=flags.expert_tensor,
            cp_comm_type=_cp_comm_type(flags.cp_comm_type),
            offload_optimizer=flags.offload_optimizer,
            offload_activations=flags.offload_activations,
        )
    changes = dict(flags.recipe_changes)
    if flags.attention is not None:
        changes["attention"] = attention_kind(model, flags.attention)
    chosen = DEFAULT_RECIPE if flags.recipe is None else named_recipe(flags.recipe)
    run = RunConfig(
        model, hardware, parallelism, chosen.with_choices(changes), flags.tensor_across_nodes
    )
    for note in run.unread_fields():
        sys.stderr.write(f"pipesim: warning: {note}\n")
    return run


@dataclass(frozen=True)
class _RunFlags:
    """The flags of a run's configuration, as given (a command without one of them: its
    default)."""

    model: str
    hardware: str
    optimizer: str | None
    master_weights: bool | None
    dtype: str | None
    seq_length: int | None
    memory_reserve: float | None
    fragmentation: float | None
    tensor: int
    sequence_parallel: bool
    recompute: str
    zero: int
    reshard_after_forward: str
    context: int
    expert: int
    expert_tensor: int | None
    cp_comm_type: str
    offload_optimizer: bool
    offload_activations: int
    data: int | None
    recipe: str | None
    recipe_changes: tuple[tuple[str, object], ...]
    attention: str | None
    tensor_across_nodes: bool

    @classmethod
    def of(cls, args: argparse.Namespace, data_parallel: int | None) -> _RunFlags:
        def given(name: str, absent: Any = None) -> Any:
            value = getattr(args, name, None)
            return absent if value is None else value

        layout = data_parallel is not None  # a plan's flags list what its search tries
        # Each switch is three-state: absent (None) keeps the recipe's choice, --X sets it
        # true and --no-X false (a run file's false, a translated Megatron launch's).
        changes = tuple(
            (choice, value)
            for choice in RECIPE_SWITCHES
            if (value := getattr(args, choice, None)) is not None
        )
        return cls(
            args.model,
            args.hardware,
            given("optimizer"),
            given("master_weights"),
            given("dtype"),
            given("seq_length"),
            given("memory_reserve"),
            given("fragmentation"),
            given("tensor_parallel", 1) if layout else 1,
            bool(getattr(args, "sequence_parallel", False)) if layout else False,
            given("recompute", "none") if layout else "none",
            given("zero", 0) if layout else 0,
            given("reshard_after_forward", "default") if layout else "default",
            given("context_parallel", 1) if layout else 1,
            given("expert_parallel", 1) if layout else 1,
            given("expert_tensor_parallel") if layout else None,
            given("cp_comm_type", "p2p") if layout else "p2p",
            bool(getattr(args, "offload_optimizer", False)) if layout else False,
            given("offload_activations", 0) if layout else 0,
            data_parallel,
            given("recipe"),
            changes,
            given("attention"),
            bool(getattr(args, "tensor_across_nodes", False)),
        )


def _reshard_policy(text: str) -> ReshardPolicy:
    """``--reshard-after-forward``'s policy, or a one-line error naming the flag."""
    from pipesim.parallel.sharding import ReshardPolicy

    try:
        return ReshardPolicy(str(text).strip().lower())
    except ValueError:
        raise PipesimError(
            f"--reshard-after-forward must be default, always or never, got {text!r}"
        ) from None


def _cp_comm_type(text: str) -> ContextComm:
    """``--cp-comm-type``'s kind, or a one-line error naming the flag."""
    from pipesim.parallel.config import ContextComm

    try:
        return ContextComm(str(text).strip().lower())
    except ValueError:
        raise PipesimError(f"--context-exchange must be p2p or all-gather, got {text!r}") from None
