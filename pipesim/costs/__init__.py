"""Per-stage costs: three sources (synthetic, spec-derived, calibrated), one engine.

Each name below loads its module on first use (:mod:`pipesim.common.lazy`): a synthetic
simulation does not load the spec-derived costs and, with them, the workload's models.
"""

from typing import TYPE_CHECKING

from pipesim.common.lazy import lazy_exports

if TYPE_CHECKING:
    from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
    from pipesim.costs.spec_derived import costs_from_model
    from pipesim.costs.synthetic import synthetic_costs

__all__ = ["PipelineCosts", "StageCosts", "costs_from_model", "synthetic_costs"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "PipelineCosts": "pipesim.costs.pipeline_costs",
        "StageCosts": "pipesim.costs.pipeline_costs",
        "costs_from_model": "pipesim.costs.spec_derived",
        "synthetic_costs": "pipesim.costs.synthetic",
    },
)
