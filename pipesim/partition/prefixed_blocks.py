"""Exact partition feasibility for a transformer with a few leading layers of other kinds.

A mixture-of-experts model such as DeepSeek-V3 is an embedding, a few dense blocks, many
identical expert blocks and an output layer: not the shape :mod:`pipesim.partition.blocks`
answers (its stages' costs depend on where they start, not only on how many blocks they hold),
so with several stages per device the memory-aware search walked partitions depth first and
often spent its node budget without an answer. The leading layers are few, so the ways a
partition can cut them are few too, and each way leaves the block shape behind:

* a *family* is the set of cuts a partition makes inside the h leading layers (the embedding
  and the blocks of other kinds): stages 0..j-1 hold fixed spans of them, stage j holds the
  rest of them and n_j >= 0 of the identical blocks, every later stage but the last one block
  or more, the last stage n >= 0 blocks and the output layer (where j is the last stage, it
  holds the rest of the leading layers, every block and the output layer);
* within a family every stage's costs depend on its count of blocks alone (the fixed stages
  hold count 0 only), which is :class:`~pipesim.partition.blocks.BlockFeasibility`'s question,
  asked with each stage's fewest blocks and the layers it holds besides them;
* every partition belongs to exactly one family, so one fits exactly when one of a family's
  fits, and the depth-first order's first partition (the least layers per stage, compared
  stage by stage) is the least of the families' first ones.

With h = 1 (the embedding alone before the blocks) there is one family and it is the block
test itself, which answers such models; this module declines them. It declines too where the
families are many (:data:`MOST_FAMILIES`), where the layers do not all send the same message,
or where a device has a table of its own; the depth-first search answers those.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from pipesim.partition.blocks import UNKNOWN, BlockFeasibility, _Rows
from pipesim.partition.problem import PartitionProblem

MOST_FAMILIES = 64
"""The most families (2^(h-1) for h leading layers) this test enumerates: h <= 7."""


def leading_layers(problem: PartitionProblem) -> int:
    """h: the layers before the run of identical blocks that ends at the output layer (with
    ``--recompute N``, blocks flagged as such whose twins are identical too); 1 where only the
    embedding precedes them, L - 1 where there is no such run."""
    layers, first = problem.layers, problem.recompute_first
    block = len(layers) - 2

    def alike(index: int) -> bool:
        if layers[index] != layers[block]:
            return False
        if first is None:
            return True
        return first.blocks[index] and first.recomputed[index] == first.recomputed[block]

    if first is not None and not first.blocks[block]:
        return block + 1  # the last block is not recomputed as a block: no such run
    start = block
    while start > 1 and alike(start - 1):
        start -= 1
    return start


class PrefixedFeasibility:
    """The block test over each family of a model with h > 1 leading layers (see the module
    docstring), with :class:`~pipesim.partition.blocks.BlockFeasibility`'s two questions."""

    def __init__(self, families: list[BlockFeasibility]) -> None:
        self._families = families

    @classmethod
    def of(
        cls, problem: PartitionProblem, parts: _Rows, matrices: Sequence[np.ndarray]
    ) -> PrefixedFeasibility | None:
        """The test for ``problem`` with stage values ``matrices``, or None where it does not
        apply (see the module docstring)."""
        layers, stages = problem.layers, problem.stages
        last = len(layers)
        if stages < 2 or last < 4 or problem.device_layers is not None:
            return None
        first = problem.recompute_first
        if first is not None and (first.blocks[0] or first.blocks[-1]):
            return None
        lead = leading_layers(problem)
        if lead <= 1 or 2 ** (lead - 1) > MOST_FAMILIES:
            return None
        if len({x.output_bytes for x in layers[:-1]}) != 1:
            return None  # every cut a stage's table is read at carries the same message
        blocks = last - 1 - lead
        if blocks < 1:
            return None  # no run of identical blocks: nothing to share out
        counts = np.arange(blocks + 1)
        shared: dict[int, tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]] = {}
        families = []
        for size in range(min(lead - 1, stages - 1) + 1):
            for inside in itertools.combinations(range(1, lead), size):
                cuts = (0, *inside)
                if size == stages - 1:  # the last stage holds the rest: every block on it
                    families.append(cls._last_holds_the_rest(problem, parts, matrices, cuts))
                    continue
                if stages - 2 - size > blocks:
                    continue  # too few blocks for the stages after the leading layers
                families.append(cls._family(problem, parts, matrices, cuts, lead, counts, shared))
        return cls(families)

    @staticmethod
    def _last_holds_the_rest(
        problem: PartitionProblem,
        parts: _Rows,
        matrices: Sequence[np.ndarray],
        cuts: tuple[int, ...],
    ) -> BlockFeasibility:
        """The family whose stages but the last hold fixed spans of the leading layers and the
        last one everything after: no block left to share out (tables of count 0 alone)."""
        bounds = (*cuts, len(problem.layers))
        values: list[np.ndarray] = []
        memory: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for stage in range(problem.stages):
            value, memory[stage] = _fixed_span(parts, matrices, stage, bounds[stage : stage + 2], 0)
            values.append(value)
        spans = [bounds[s + 1] - bounds[s] for s in range(problem.stages)]
        return BlockFeasibility(problem, parts, values, memory, [0] * problem.stages, spans)

    @staticmethod
    def _family(
        problem: PartitionProblem,
        parts: _Rows,
        matrices: Sequence[np.ndarray],
        cuts: tuple[int, ...],
        lead: int,
        counts: np.ndarray,
        shared: dict[int, tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]],
    ) -> BlockFeasibility:
        """The block test of the family whose stages 0..j-1 hold [cuts[i], cuts[i+1]) and
        stage j starts at cuts[j] (j = len(cuts) - 1); ``shared`` keeps the tables of the
        stages after j, which are the same in every family."""
        stages, last = problem.stages, len(problem.layers)
        blocks = len(counts) - 1
        straddle = len(cuts) - 1
        values: list[np.ndarray] = []
        memory: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        least: list[int] = []
        others: list[int] = []
        for stage in range(stages):
            if stage < straddle:  # a fixed span of the leading layers: count 0 alone
                span = cuts[stage : stage + 2]
                value, memory[stage] = _fixed_span(parts, matrices, stage, span, blocks)
                values.append(value)
                least.append(0)
                others.append(span[1] - span[0])
                continue
            if stage == straddle:  # the rest of the leading layers and n >= 0 blocks
                start = cuts[straddle]
                ends = lead + counts
                value = np.array(matrices[stage][start, ends], dtype=float)
                static, levels = parts.row(stage, start)
                values.append(value)
                memory[stage] = (
                    np.asarray(static[ends], float),
                    np.asarray(levels[:, ends], float),
                )
                least.append(0)
                others.append(lead - start)
                continue
            if stage not in shared:
                shared[stage] = _block_stage(problem, parts, matrices, stage, lead, counts)
            value, table = shared[stage]
            values.append(value)
            memory[stage] = table
            least.append(0 if stage == stages - 1 else 1)
            others.append(1 if stage == stages - 1 else 0)
        assert last - 1 - lead == blocks
        return BlockFeasibility(problem, parts, values, memory, least, others)

    def first_fit(self, limit: float, build: bool = True) -> tuple[int, ...] | bool | str | None:
        """The depth-first order's first partition within ``limit`` that fits every device:
        the least of the families' first ones (True where ``build`` is False and one exists),
        None where none does, :data:`~pipesim.partition.blocks.UNKNOWN` where a family
        cannot tell (and none is known to fit, or the least is asked)."""
        found: list[tuple[int, ...]] = []
        unknown = False
        for family in self._families:
            answer = family.first_fit(limit, build)
            if answer is True:
                return True
            if isinstance(answer, tuple):
                found.append(answer)
            elif answer == UNKNOWN:
                unknown = True
        if unknown:
            return UNKNOWN
        return min(found) if found else None

    def feasible_limits(self, limits: np.ndarray) -> np.ndarray | None:
        """For each of ``limits``, whether some family's partition fits within it, all at
        once; None where a family cannot answer so."""
        out = np.zeros(len(limits), dtype=bool)
        for family in self._families:
            answers = family.feasible_limits(limits)
            if answers is None:
                return None
            out |= answers
        return out


def _fixed_span(
    parts: _Rows,
    matrices: Sequence[np.ndarray],
    stage: int,
    span: tuple[int, ...],
    blocks: int,
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """A stage holding the layers [start, end) of ``span`` and no block, per count 0..B of
    blocks: its own time and memory at count 0, and at every count above an infinite time and
    static memory (a block more never fits)."""
    start, end = span
    value = np.full(blocks + 1, math.inf)
    value[0] = matrices[stage][start, end]
    static, levels = parts.row(stage, start)
    fixed_static = np.full(blocks + 1, math.inf)
    fixed_static[0] = static[end]
    fixed_levels = np.zeros((levels.shape[0], blocks + 1))
    fixed_levels[:, 0] = levels[:, end]
    return value, (fixed_static, fixed_levels)


def _block_stage(
    problem: PartitionProblem,
    parts: _Rows,
    matrices: Sequence[np.ndarray],
    stage: int,
    lead: int,
    counts: np.ndarray,
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """A stage after the leading layers, per count of blocks: a middle one read from the first
    block it can start at (its costs are its count's wherever it starts), the last one from
    every start before the output layer."""
    last = len(problem.layers)
    if stage == problem.stages - 1:  # n blocks and the output layer: [L - 1 - n, L)
        starts = last - 1 - counts
        value = np.asarray(matrices[stage][starts, last], dtype=float)
        static, levels = parts.column(stage, last)
        return value, (np.asarray(static[starts], float), np.asarray(levels[:, starts], float))
    start = max(stage, lead)
    ends = np.minimum(start + counts, last - 1)
    value = np.array(matrices[stage][start, ends], dtype=float)
    value[0] = math.inf  # a middle stage holds at least one block
    value[counts > last - 1 - start] = math.inf
    static, levels = parts.row(stage, start)
    return value, (np.asarray(static[ends], float), np.asarray(levels[:, ends], float))


def shaped_feasibility(
    problem: PartitionProblem, parts: _Rows, matrices: Sequence[np.ndarray]
) -> BlockFeasibility | PrefixedFeasibility | None:
    """The exact test that answers ``problem``'s shape: the block test, the test over the
    families of its leading layers, or None (the depth-first search decides)."""
    return BlockFeasibility.of(problem, parts, matrices) or PrefixedFeasibility.of(
        problem, parts, matrices
    )
