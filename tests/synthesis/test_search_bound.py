"""The synthesiser's work is bounded by the order's size: a budget of candidates scaled by
the action count (PORTFOLIO_WORK / 3·S·M), so that a large order (K=64, M=4096 under the size
limit) builds one or a few orders instead of the whole greedy portfolio; small orders still
try every candidate."""

from __future__ import annotations

from typing import Any

import pytest

from pipesim.costs.synthetic import synthetic_costs
from pipesim.synthesis import synthesis
from pipesim.synthesis.list_scheduler import greedy_schedule, policies
from pipesim.synthesis.synthesis import in_flight_peaks, portfolio_budget, synthesize


def _counting_greedy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    built: list[str] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        built.append(args[3].name)
        return greedy_schedule(*args, **kwargs)

    monkeypatch.setattr(synthesis, "greedy_schedule", counted)
    return built


def test_a_small_order_tries_the_whole_portfolio(monkeypatch: pytest.MonkeyPatch) -> None:
    built = _counting_greedy(monkeypatch)
    found = synthesize(synthetic_costs(4, 1, 1.0, 2.0, 1.0), 8, 2, search_evaluations=0)
    assert built == [p.name for p in policies(1)]
    assert max(in_flight_peaks(found.schedule)) <= 2


def test_the_budget_scales_with_the_actions() -> None:
    assert portfolio_budget(range(4), 8) >= len(policies(1)) + len(synthesis.FIXED_SEEDS)
    assert portfolio_budget(range(64), 4096) == 1  # 786,432 actions: one candidate
    assert portfolio_budget(range(64), 1024) == synthesis.PORTFOLIO_WORK // (3 * 64 * 1024)


def test_beyond_the_budget_the_fixed_schedules_come_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With room for two candidates and 1F1B and ZB-H1 within the limit, no greedy order is
    built at all; the search keeps within the limit."""
    monkeypatch.setattr(synthesis, "PORTFOLIO_WORK", 2 * 3 * 4 * 8)
    built = _counting_greedy(monkeypatch)
    found = synthesize(synthetic_costs(4, 1, 1.0, 2.0, 1.0), 8, 4, search_evaluations=0)
    assert built == []
    assert [name for name, _ in found.candidates] == ["zb-h1", "1f1b"]


def test_with_no_fixed_schedule_within_the_limit_one_greedy_order_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(synthesis, "PORTFOLIO_WORK", 1)
    built = _counting_greedy(monkeypatch)
    found = synthesize(synthetic_costs(4, 1, 1.0, 2.0, 1.0), 8, 1, search_evaluations=0)
    assert built == [policies(1)[0].name]
    assert found.chosen == built[0] and max(in_flight_peaks(found.schedule)) <= 1
