"""The planner's search rate (``pytest -m bench``): measured and printed, never asserted."""

from __future__ import annotations

import json

import pytest

from pipesim.plan import plan
from pipesim.plan.report import report_json
from tests.plan.settings import plan_settings

CASES = [
    ("gpt-3.8b", "v100-16gb-nvlink", 64, 512),  # PipeDream-2BW's setting
    ("gpipe-transformer-48", "a100", 8, 32),  # GPipe's Transformer-48 on one A100 server
    ("gpt3-175b", "a100", 1024, 1536),  # Megatron-LM's GPT-3 run: T, K, D, v, M, b, ...
    ("gpt3-175b", "a100", 16384, 1536),
]


@pytest.mark.bench
@pytest.mark.parametrize(("model", "hardware", "devices", "batch"), CASES)
def test_plan_search_rate(model: str, hardware: str, devices: int, batch: int) -> None:
    report = plan(plan_settings(model, hardware, devices, batch), show_progress=False)
    payload = report_json(report)
    assert payload["plans"]
    keys = ("evaluated", "examined", "simulated", "seconds", "configurations_per_second")
    print(json.dumps({"model": model, **{k: payload[k] for k in keys}}))
