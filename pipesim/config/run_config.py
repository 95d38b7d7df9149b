"""One run's configuration: what is trained, on what, laid out how, by what software.

A :class:`RunConfig` is the one value from which costs are built
(:func:`pipesim.costs.model_on_hardware.model_on_hardware`): the model (its architecture and
its training precision and optimizer state), the hardware, every parallel dimension but the
pipeline's shape (tensor, sequence, recomputation, ZeRO, data), and the software's
:class:`~pipesim.config.recipe.Recipe`. The pipeline's shape (K devices, v chunks, M
micro-batches, the schedule) is the simulation's, not the run's configuration, so one
``RunConfig`` serves every shape a sweep or a planner tries.

It checks the whole configuration when it is made (a tensor-parallel group a node cannot hold,
a recipe's attention for a model given as layers), so a command can check its input once,
before any work, and then call the library once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

from pipesim.common.checks import SpecError
from pipesim.config.recipe import Recipe
from pipesim.config.recipes import DEFAULT_RECIPE
from pipesim.errors import named
from pipesim.hardware.catalogue import HardwareSpec
from pipesim.parallel.config import IDENTITY, Parallelism
from pipesim.workload.model import Model
from pipesim.workload.sharding import ShardedLayers, sharded_layers
from pipesim.workload.transformer import with_architecture


@dataclass(frozen=True)
class RunConfig:
    """One training run as the simulator costs it (see the module docstring).

    Attributes:
        model: what is trained, as the catalogue or a TOML file gives it: an architecture (or
            layers), its dtype, optimizer state and master weights.
        hardware: the cluster's accelerator and network.
        parallelism: tensor, sequence, recomputation, ZeRO and data parallelism.
        recipe: the software's choices (:mod:`pipesim.config.recipe`).
        tensor_across_nodes: a tensor-parallel group may span whole nodes (Megatron allows it,
            and it is slow); otherwise it must sit in one node.
    """

    model: Model
    hardware: HardwareSpec
    parallelism: Parallelism = IDENTITY
    recipe: Recipe = DEFAULT_RECIPE
    tensor_across_nodes: bool = False

    def __post_init__(self) -> None:
        for attribute, kind in (
            ("model", Model),
            ("hardware", HardwareSpec),
            ("parallelism", Parallelism),
            ("recipe", Recipe),
        ):
            value = getattr(self, attribute)
            if not isinstance(value, kind):
                raise SpecError(f"run.{attribute} must be a {kind.__name__}, got {value!r}")
        if not isinstance(self.tensor_across_nodes, bool):
            raise SpecError(
                f"run.tensor_across_nodes must be true or false, got {self.tensor_across_nodes!r}"
            )
        check_tensor_placement(
            self.hardware, self.parallelism.tensor, across_nodes=self.tensor_across_nodes
        )
        self.sharded()  # T splits the heads and widths, the sequence: the layers can be built
        self.hardware.accelerator.peak(self.model.dtype)  # a dtype the accelerator has

    @cached_property
    def trained_model(self) -> Model:
        """The model as the recipe trains it: a transformer's layers rebuilt with the recipe's
        attention and gradient accumulation where they differ from how the model was built;
        a model given as layers as it is (the recipe's choices have no layer to change:
        :meth:`unread_fields` says so)."""
        model, recipe = self.model, self.recipe
        arch = model.architecture
        if arch is None:
            return model
        attention = arch.attention if recipe.attention is None else recipe.attention
        fused = recipe.fused_gradient_accumulation
        if attention is arch.attention and fused == model.fused_gradient_accumulation:
            return model
        changed = dataclasses.replace(arch, attention=attention)
        return with_architecture(model, changed, fused_accumulation=fused)

    @cached_property
    def job_hardware(self) -> HardwareSpec:
        """The hardware as this run's messages see it: the recipe's per-message overhead in
        place of the spec's, when the recipe gives one."""
        overhead = self.recipe.message_overhead_s
        if overhead is None or overhead == self.hardware.message_overhead_s:
            return self.hardware
        return dataclasses.replace(self.hardware, message_overhead_s=overhead)

    def sharded(self) -> ShardedLayers:
        """The trained model's layers as one tensor-parallel rank holds them."""
        return sharded_layers(self.trained_model, self.parallelism)

    def with_parallelism(self, parallelism: Parallelism) -> RunConfig:
        """The same run under another parallel layout (a planner's candidate)."""
        if parallelism == self.parallelism:
            return self
        return dataclasses.replace(self, parallelism=parallelism)

    def unread_fields(self) -> tuple[str, ...]:
        """What this configuration sets that no cost reads, a line each (a command warns with
        them): the accelerator's ``efficiency`` a user's file gave where every layer is timed
        kernel by kernel, and a recipe's gradient accumulation, attention or tensor-parallel
        overlap for a model given as layers; and one combination the frameworks refuse that
        the simulation still prices: the tensor-parallel overlap without sequence
        parallelism."""
        notes = []
        accelerator = self.hardware.accelerator
        kernel_level = accelerator.kernel_level and all(
            layer.work is not None for layer in self.model.layers
        )
        if kernel_level and accelerator.efficiency_given:
            notes.append(
                f"hardware {self.hardware.name}: accelerator.efficiency "
                f"{accelerator.efficiency:g} is read by no layer of {self.model.name}: every "
                "layer is timed kernel by kernel on the matmul_efficiency curve"
            )
        if self.model.architecture is None:
            recipe = self.recipe
            if not recipe.fused_gradient_accumulation:
                notes.append(
                    f"recipe {recipe.name}: its unfused gradient accumulation changes no layer "
                    f"of {self.model.name}, which is given as layers with their costs whole"
                )
            if recipe.attention is not None:
                notes.append(
                    f"recipe {recipe.name}: its {recipe.attention.value} attention changes no "
                    f"layer of {self.model.name}, which is given as layers with no attention"
                )
            if recipe.tp_comm_overlap:
                notes.append(
                    f"recipe {recipe.name}: its tensor-parallel overlap changes no layer of "
                    f"{self.model.name}, which is given as layers with no tensor parallelism"
                )
        elif (
            self.recipe.tp_comm_overlap
            and self.parallelism.tensor > 1
            and not self.parallelism.sequence_parallel
        ):
            notes.append(
                f"recipe {self.recipe.name}: tensor-parallel overlap without sequence "
                "parallelism, which Megatron-Core refuses (it asserts --sequence-parallel with "
                "--tp-comm-overlap); simulated as overlapped all the same"
            )
        return tuple(notes)


def check_tensor_placement(
    hardware: HardwareSpec, tensor: int, *, across_nodes: bool = True
) -> None:
    """Refuse a tensor-parallel group that a node of ``hardware`` does not hold evenly: T must
    divide the node's devices (T ranks inside one node, on its fast links), or, when
    ``across_nodes`` allows it, be a multiple of them (whole nodes, every collective over the
    inter-node links: Megatron allows it, and it is slow)."""
    per_node = hardware.devices_per_node
    if tensor == 1 or per_node is None or per_node % tensor == 0:
        return
    if tensor % per_node:
        raise SpecError(
            f"{named('tensor_parallel')} {tensor} must divide the {per_node} devices of one "
            f"node of {hardware.name} (or be a multiple of them): a tensor-parallel group must "
            "sit in one node, or fill whole ones"
        )
    if not across_nodes:
        raise SpecError(
            f"{named('tensor_parallel')} {tensor} is larger than one node of {hardware.name} "
            f"({per_node} devices): its collectives would cross nodes on every layer; add "
            f"{named('tensor_across_nodes')} if that is what you want"
        )
