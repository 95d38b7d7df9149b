"""What ``pipesim validate`` concludes: per case and in all, typed, and its ``results.json``.

:class:`ValidationResult` is what the report, the terminal table and ``--json`` read; its
``to_json`` writes the keys ``results.json`` has always had (``suite``, ``summary``,
``breaches``, ``records``, ``cases`` ...) and the verdict beside them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Any

from validation.estimate import STATISTIC, Statistic, estimate
from validation.predict import calibrated_link, calibrated_profiles
from validation.schema import CaseMeasurement, Comparison, CrosscheckRecord, Summary


class Verdict(Enum):
    """The outcome of a validation: the simulator's errors are within the thresholds, exceed
    them, or the measurements were too noisy to tell (the host was busy)."""

    WITHIN = "within"
    EXCEEDED = "exceeded"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class CaseResult:
    """One case: what it measured, and its runs and cross-checks set against predictions."""

    measurement: CaseMeasurement
    records: tuple[Comparison, ...]
    crosscheck: tuple[CrosscheckRecord, ...]
    statistic: Statistic = STATISTIC

    @property
    def name(self) -> str:
        """The case's name."""
        return self.measurement.case.name

    def to_json(self) -> dict[str, Any]:
        """The case's entry of ``results.json``: calibration, link, baselines, records,
        cross-check, measured timelines, machine, and the host's load."""
        m = self.measurement
        chunks = sorted(m.isolated_calibration)
        solo = {
            key: estimate(values, self.statistic)
            for key, values in m.solo_samples.items()
            if values
        }
        return {
            "case": m.case.to_json(),
            "link": m.link.to_json(),
            "calibration": {
                str(c): [p.to_json() for p in calibrated_profiles(m, c, self.statistic)]
                for c in chunks
            },
            "isolated_calibration": {
                str(c): [p.to_json() for p in m.isolated_calibration[c]] for c in chunks
            },
            "solo_calibration": solo or None,
            "probes": {str(c): list(names) for c, names in m.probes.items()},
            "in_situ_latency_s": {
                str(c): calibrated_link(m, c, self.statistic).latency_s
                if m.latency_samples.get(c)
                else None
                for c in chunks
            },
            "baseline": {
                str(k): estimate(v, self.statistic) for k, v in m.baseline_samples.items() if v
            },
            "records": [r.to_json() for r in self.records],
            "crosscheck": [c.to_json() for c in self.crosscheck],
            "timelines": {
                f"{run.schedule}/{run.microbatches}": [list(row) for row in run.timeline]
                for run in m.runs
            },
            "machine": m.machine.to_json(),
            "host": m.host.to_json(),
            "rounds": m.rounds,
            "statistic": self.statistic.value,
        }


@dataclass(frozen=True)
class ValidationResult:
    """A whole validation: every case, the aggregate errors, the thresholds and the verdict.

    Attributes:
        breaches: which thresholds the errors exceed ("median time error 6.1% > 5.0%").
        verdict_reason: one line saying why the verdict is what it is.
        skipped: what the suite could not run here, with the reasons.
        by_statistic: the same measurements predicted and compared with every
            :class:`~validation.estimate.Statistic`, by its value: the data behind the choice
            of one.
    """

    suite: str
    backend: str
    pipesim: str
    max_median_error: float
    max_error: float
    summary: Summary
    breaches: tuple[str, ...]
    verdict: Verdict
    verdict_reason: str
    cases: tuple[CaseResult, ...]
    skipped: tuple[dict[str, Any], ...]
    by_statistic: dict[str, Summary] = dataclasses.field(default_factory=dict)

    @property
    def records(self) -> tuple[Comparison, ...]:
        """Every case's records, in order."""
        return tuple(r for case in self.cases for r in case.records)

    @property
    def passed(self) -> bool:
        """Within the thresholds, on measurements quiet enough to tell."""
        return self.verdict is Verdict.WITHIN

    def to_json(self) -> dict[str, Any]:
        """``results.json``'s object."""
        return {
            "suite": self.suite,
            "backend": self.backend,
            "pipesim": self.pipesim,
            "machine": self.cases[0].measurement.machine.to_json() if self.cases else {},
            "thresholds": {
                "max_median_error": self.max_median_error,
                "max_error": self.max_error,
            },
            "summary": self.summary.to_json(),
            "breaches": list(self.breaches),
            "verdict": self.verdict.value,
            "verdict_reason": self.verdict_reason,
            "records": [r.to_json() for r in self.records],
            "cases": [case.to_json() for case in self.cases],
            "skipped": list(self.skipped),
            "by_statistic": {
                name: summary.to_json() for name, summary in self.by_statistic.items()
            },
        }
