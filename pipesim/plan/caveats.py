"""What a plan's ranking assumed, and which of its plans are a tie inside the model's error.

A planner's table reads as a verdict. Two things make it less than one, and the report says
both where the user reads it:

* **Assumptions that move the ranking**: inputs that were defaulted or that nobody measured
  (a hardware file without a matmul efficiency curve makes tensor parallelism free in
  compute; a flat fabric makes every pair of devices equally close), and the switches the
  search held fixed instead of trying (the recipe's gradient-reduce overlap, its attention
  kernel, its blocking messages).
* **Ties**: plans whose predicted times differ by less than pipesim's own error are not
  ranked by the prediction; the settings they differ in are what a measurement on the
  machine would have to separate.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.errors import named
from pipesim.hardware.network import Topology
from pipesim.plan.planner import PlanReport

# pipesim's median error on the runs it was built against: Megatron-LM's Table 1 (arXiv
# 2104.04473), 4.0% (in-sample, so a floor). Out of sample the mean |error| on the step is
# 11.0% (`pipesim reproduce published`, 13 runs): a tie below this is a tie a fortiori.
# provenance: validation/reproduce/megatron.py's TABLE_1 (the published teraFLOP/s per GPU) and
# the a100 entry (DERIVED, IN-SAMPLE: the median |pipesim / published - 1| of the ten rows'
# teraFLOP/s, 0.0396, to 0.1%; as a step-time error the same rows give 0.0381);
# tests/config/test_provenance.py derives it, so a change of the time model that moves the
# median must move this with it
TIE_FRACTION = 0.040


@dataclass(frozen=True)
class Tie:
    """Plans 1 to ``last`` (1-based) predicted within ``spread`` (a fraction) of plan 1, which
    is less than :data:`TIE_FRACTION`; ``differ`` names the settings they do not share."""

    last: int
    spread: float
    differ: tuple[str, ...]

    def sentence(self) -> str:
        """One line for the report."""
        separate = ", ".join(self.differ) if self.differ else "their partitions only"
        return (
            f"plans 1-{self.last} are within {self.spread:.1%} of plan 1: a tie inside "
            f"pipesim's error ({TIE_FRACTION:.1%} median on the runs it was built against), "
            f"not a ranking; what would separate them is measuring {separate} on the machine"
        )


def tie(report: PlanReport) -> Tie | None:
    """The plans from the first on that the model cannot rank apart, or None when plan 2 is
    already slower by more than the model's error (or there is no plan 2)."""
    times = [e.iteration_time_s or 0.0 for e in report.plans]
    if len(times) < 2 or times[0] <= 0:
        return None
    last = 1
    while last < len(times) and times[last] / times[0] - 1 < TIE_FRACTION:
        last += 1
    if last == 1:
        return None
    tied = [e.candidate.settings() for e in report.plans[:last]]
    # CP and EP are stated only where they are not 1: an absent one reads as 1
    keys = list(dict.fromkeys(key for s in tied for key in s))
    differ = tuple(key for key in keys if len({s.get(key, "1") for s in tied}) > 1)
    return Tie(last, times[last - 1] / times[0] - 1, differ)


def assumptions(report: PlanReport) -> list[str]:
    """What the ranking assumed that moves it, a line each."""
    run = report.settings.run
    hardware, recipe = run.job_hardware, run.recipe
    accelerator = hardware.accelerator
    lines = []
    if not accelerator.kernel_level:
        lines.append(
            f"{hardware.name} has no matmul_efficiency curve: every matmul runs at one "
            f"efficiency ({accelerator.efficiency or 0:g}), so the smaller matmuls of tensor "
            "parallelism lose nothing here and plans with T > 1 may rank too high; give the "
            "hardware file a measured curve (pipesim hardware show h100 has one)"
        )
    if hardware.topology is Topology.ALL_TO_ALL and report.settings.devices > 1:
        lines.append(
            f"{hardware.name} is a flat fabric (a link per pair of devices, all "
            f"{report.settings.devices:,} alike): no plan pays for crossing between servers"
        )
    held = [
        f"overlap_grad_reduce={'on' if recipe.overlap_grad_reduce else 'off'}",
        f"blocking_p2p={'on' if recipe.blocking_p2p else 'off'}",
        f"scatter_gather_p2p={'on' if recipe.scatter_gather_p2p else 'off'}",
        f"tp_comm_overlap={'on' if recipe.tp_comm_overlap else 'off'}",
        "attention=" + (recipe.attention.value if recipe.attention is not None else "the model's"),
    ]
    lines.append(
        f"held fixed, not searched: the recipe {recipe.name}'s {', '.join(held)}; plan again "
        f"with another value to compare ({named('overlap_grad_reduce')}, {named('recipe')})"
    )
    return lines
