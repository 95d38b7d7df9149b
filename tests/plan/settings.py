"""Plan settings for the tests from names, as the command line reads them (cli.run_config)."""

from __future__ import annotations

import argparse
from typing import Any

from pipesim.config import DEFAULT_RECIPE, RunConfig
from pipesim.hardware import resolve_hardware
from pipesim.plan import PlanSettings
from pipesim.request.cost_request import resolved_model
from pipesim.workload.architecture import Attention


def plan_settings(
    model: str,
    hardware: str,
    devices: int,
    batch: int,
    *,
    optimizer_state: str | None = None,
    master_weights: bool | None = None,
    dtype: str | None = None,
    attention: str | None = None,
    overlap_grad_reduce: bool = False,
    **search: Any,
) -> PlanSettings:
    """``PlanSettings`` of the model and hardware named (or TOML files), with the optimizer,
    precision and recipe changes given, and ``search``'s space."""
    changes: dict[str, object] = {}
    if overlap_grad_reduce:
        changes["overlap_grad_reduce"] = True
    if attention is not None:
        changes["attention"] = Attention(attention)
    run = RunConfig(
        resolved_model(model, optimizer_state, master_weights, dtype),
        resolve_hardware(hardware),
        recipe=DEFAULT_RECIPE.with_choices(changes),
    )
    return PlanSettings(run, devices, batch, model_name=model, hardware_name=hardware, **search)


def plan_case(
    model: str, hardware: str, devices: int, batch: int, **options: Any
) -> tuple[PlanSettings, argparse.Namespace]:
    """:func:`plan_settings`, and the command line's arguments for the same run (what
    ``pipesim plan`` hands its re-simulation command)."""
    flags = {
        "optimizer": options.get("optimizer_state"),
        "master_weights": options.get("master_weights"),
        "dtype": options.get("dtype"),
        "recipe": None,
        "attention": options.get("attention"),
        "overlap_grad_reduce": options.get("overlap_grad_reduce", False),
    }
    settings = plan_settings(model, hardware, devices, batch, **options)
    return settings, argparse.Namespace(**flags)
