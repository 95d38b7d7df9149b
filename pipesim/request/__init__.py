"""Cost requests: what the command line and the sweeps ask for by name (a model, a hardware
spec, a partition or its objective, data parallelism), resolved into pipeline costs. They sit
above :mod:`pipesim.costs` and :mod:`pipesim.partition`, which they compose."""

from pipesim.request.cost_request import CostRequest, ModelRequest, SyntheticRequest, resolved_model

__all__ = ["CostRequest", "ModelRequest", "SyntheticRequest", "resolved_model"]
