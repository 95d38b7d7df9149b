"""``pipesim validate``: calibrate, predict, run, compare; report; a verdict.

:func:`run_validation` measures each case (or reads its saved measurements), compares, writes
``report.md``, ``results.json`` and the figures, and concludes: within the thresholds, past
them, or inconclusive when the measurements' own noise is larger than the error threshold (the
host was busy: a claim about the simulator would be a claim about the noise).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from application.outputs import new_output_directory, write_text_atomically
from pipesim import __version__
from pipesim.common.progress import progress
from pipesim.errors import Interrupted, PipesimError
from pipesim.files.inputs import decode_text, read_input
from pipesim.files.strict_json import json_text
from validation.compare import (
    RunKey,
    aggregate,
    breaches,
    case_predictions,
    case_series,
    compare_case,
    crosscheck_records,
)
from validation.estimate import STATISTIC, Statistic
from validation.predict import RoundPrediction
from validation.report import write_report
from validation.results import CaseResult, ValidationResult, Verdict
from validation.rounds import Stability
from validation.schema import CaseMeasurement, Summary
from validation.session import run_case
from validation.suites import Case, full_suite, quick_suite
from validation.uncertainty import CaseSeries, error_intervals

SUITES = {"quick": quick_suite, "full": full_suite}


def suite_cases(
    suite: str, backend: str, fit_machine: bool = True
) -> tuple[list[Case], list[dict[str, Any]]]:
    """The cases of ``suite`` this machine can run, and what it skips (with reasons); a suite
    of which nothing can run here is refused. Without ``fit_machine``, every case of the
    suite (to predict measurements made on another machine)."""
    try:
        build = SUITES[suite]
    except KeyError:
        raise PipesimError(f"--suite must be one of {', '.join(SUITES)}, got {suite!r}") from None
    return build(backend, fit_machine)


def measured_path(out: Path, case: Case) -> Path:
    """Where a case's measurements are saved."""
    return out / f"measured-{case.name}.json"


def load_measurement(path: Path, case: Case, option: str = "--reuse") -> CaseMeasurement:
    """A saved measurement of ``case``; an unreadable file, one lacking a field or holding a
    value of the wrong kind, or one measured for another case (or another definition of this
    one) is a one-line error beginning with the ``option`` that read it."""
    text = decode_text(read_input(path, f"{option}: measurements"), f"{option}: {str(path)!r}")
    try:
        data = json.loads(text)  # NaN and Infinity are read, then refused naming their field
    except (ValueError, RecursionError) as error:
        raise PipesimError(f"{option}: {str(path)!r} is not JSON ({error})") from None
    try:
        measured = CaseMeasurement.from_json(data)
    except PipesimError as error:
        raise PipesimError(f"{option}: {str(path)!r}: {error}") from None
    expected, found = case.to_json(), measured.case.to_json()
    if measured.case.name != case.name:
        raise PipesimError(
            f"{option}: {str(path)!r} holds the measurements of case {measured.case.name!r}, "
            f"not of {case.name!r}"
        )
    differing = [key for key in expected if found.get(key) != expected.get(key)]
    if (
        option == "--reuse"
        and differing == ["schedules"]
        and set(found["schedules"]) <= set(expected["schedules"])
    ):
        # Measured before schedules joined the case (the synthesised ones, issue 22): what it
        # measured is predicted again; the schedules it lacks have no measurement to judge.
        return measured
    if found != expected:
        field = differing[0]
        raise PipesimError(
            f"{option}: {str(path)!r} was measured with the case's {field} {found.get(field)!r}, "
            f"and case {case.name!r} now has {expected.get(field)!r}; measure it again"
        )
    return measured


def run_validation(
    suite: str,
    backend: str,
    out: Path,
    max_median_error: float,
    max_error: float,
    cases: list[Case] | None = None,
    reuse: bool = False,
    resume: bool = False,
    stability: Stability | None = None,
    show_progress: bool = True,
) -> ValidationResult:
    """Run the suite (or the given cases), write the report into ``out``, return the result.

    Each case's measurements are written to ``out/measured-<case>.json`` as soon as they exist,
    so an interrupted validation keeps every finished case; ``reuse`` takes every case from
    there instead of measuring (to re-predict after a change to the simulator), ``resume``
    takes the cases found there and measures the others. ``stability`` keeps measuring noisy
    cases (see :class:`~validation.rounds.Stability`).
    """
    chosen, skipped = (
        suite_cases(suite, backend, fit_machine=not reuse) if cases is None else (cases, [])
    )
    if reuse and not Path(out).is_dir():  # nothing to reuse: refused without making it
        raise PipesimError(
            f"--reuse: no measurements folder at {str(out)!r}; give the --out of a validation "
            "that ran"
        )
    if reuse and cases is None:
        # The suite's cases measured where it ran (a case the machine skipped, or one a time
        # limit cut short, has no file: it is skipped here too, saying so).
        measured = [case for case in chosen if measured_path(Path(out), case).is_file()]
        if measured:
            skipped += [
                {
                    "case": case.name,
                    "schedule": "*",
                    "microbatches": "*",
                    "reason": f"not measured: no {measured_path(Path(out), case).name} in --out",
                }
                for case in chosen
                if case not in measured
            ]
            chosen = measured
    # A folder made here and left empty (a case refused, Ctrl-C before any was measured) is
    # removed again; measurements written into it stay.
    with new_output_directory(out, "--out") as out:
        results: list[CaseResult] = []
        measured_series: list[tuple[dict[RunKey, RoundPrediction], CaseSeries]] = []
        try:
            _measure_cases(
                chosen, out, reuse, resume, stability, show_progress, results, measured_series
            )
        except KeyboardInterrupt:
            kept = ", ".join(r.name for r in results) or "none"
            raise Interrupted(
                f"validate: cases measured and saved in {str(out)!r}: {kept}; run the same command "
                "with --resume to measure the rest"
            ) from None
        records = [r for case in results for r in case.records]
        intervals = error_intervals([series for _, series in measured_series], STATISTIC)
        summary = aggregate(records, intervals)
        found = breaches(summary, max_median_error, max_error)
        verdict, reason = conclude(summary, found, results, max_median_error, max_error)
        result = ValidationResult(
            suite=suite,
            backend=backend,
            pipesim=__version__,
            max_median_error=max_median_error,
            max_error=max_error,
            summary=summary,
            breaches=tuple(found),
            verdict=verdict,
            verdict_reason=reason,
            cases=tuple(results),
            skipped=tuple(skipped),
            # The reported statistic's entry is the summary itself (its records compared with
            # it); only the others are compared again.
            by_statistic={
                statistic.value: summary
                if statistic is STATISTIC
                else aggregate(
                    [
                        r
                        for case, (predictions, _) in zip(results, measured_series, strict=True)
                        for r in compare_case(case.measurement, statistic, predictions)
                    ]
                )
                for statistic in Statistic
            },
        )
        write_report(out, result, _figures(out, results, [p for p, _ in measured_series]))
        return result


def _measure_cases(
    chosen: Sequence[Case],
    out: Path,
    reuse: bool,
    resume: bool,
    stability: Stability | None,
    show_progress: bool,
    results: list[CaseResult],
    measured_series: list[tuple[dict[RunKey, RoundPrediction], CaseSeries]],
) -> None:
    """Measure (or read) each case and compare it, appending to ``results`` (and its
    per-round predictions and series to ``measured_series``) as each ends."""
    with progress(len(chosen), "validate", enabled=show_progress) as bar:
        for case in chosen:
            saved = measured_path(out, case)
            if reuse and not saved.is_file():
                raise PipesimError(f"--reuse: no measurements at {str(saved)!r}")
            if reuse or (resume and saved.is_file()):
                measured = load_measurement(saved, case, "--reuse" if reuse else "--resume")
            else:

                def show(text: str, name: str = case.name) -> None:
                    bar.set_postfix_str(f"{name}: {text}")

                show("starting")
                if case.backend.partitioned:
                    from validation.lane_session import run_lane_case

                    measured = run_lane_case(case, stability=stability, on_progress=show)
                else:
                    measured = run_case(case, stability=stability, on_progress=show)
                write_text_atomically(
                    saved, json_text(measured.to_json()), field="--out measurements"
                )
            predictions = case_predictions(measured)
            measured_series.append((predictions, case_series(measured, predictions)))
            results.append(
                CaseResult(
                    measured,
                    tuple(compare_case(measured, STATISTIC, predictions)),
                    tuple(crosscheck_records(measured, STATISTIC, predictions)),
                )
            )
            bar.update()


def conclude(
    summary: Summary,
    found: Sequence[str],
    cases: Sequence[CaseResult],
    max_median_error: float,
    max_error: float,
) -> tuple[Verdict, str]:
    """The verdict and its reason, read from the errors' intervals (``summary``'s
    ``*_low``/``*_high``, from resampling the rounds).

    - No run measured: never a pass.
    - Every median error's interval and every max error under its threshold: within.
    - A case measured on a busy host (:attr:`~validation.host.HostLoad.busy`): inconclusive,
      whatever the errors (contention reaches calibration and measurement unequally, so errors
      there are claims about the host), with the loads.
    - An interval wholly above its threshold: exceeded.
    - Otherwise an interval straddles its threshold: inconclusive, the repeats too few or too
      noisy to tell; measuring longer (``--repeat-until-stable``) narrows the intervals.
    """
    if summary.runs == 0:
        return Verdict.EXCEEDED, "no run was measured: nothing was validated"
    checks = [
        (f"{which} {name} error", getattr(summary, f"{which}_{name}_error"), low, high, limit)
        for which, limit in (("median", max_median_error), ("max", max_error))
        for name in ("time", "speedup")
        for low, high in [
            (
                getattr(summary, f"{which}_{name}_error_low"),
                getattr(summary, f"{which}_{name}_error_high"),
            )
        ]
    ]
    confidence = f"{summary.confidence:.0%} interval " if summary.confidence else ""

    def figure(label: str, value: float, low: float, high: float, limit: float) -> str:
        return f"{label} {value:.1%} ({confidence}{low:.1%}-{high:.1%}) vs {limit:.1%}"

    figures = "; ".join(figure(*check) for check in checks)
    busy = [c for c in cases if c.measurement.host.busy]
    if busy:
        hosts = "; ".join(f"{c.name}: {c.measurement.host.describe()}" for c in busy)
        return (
            Verdict.INCONCLUSIVE,
            f"inconclusive: the host was busy ({hosts}; {figures})",
        )
    # A median is within when its whole interval is; a maximum when the figure is (the
    # bootstrap's upper percentiles of a maximum over dozens of noisy runs overstate it: each
    # resample's quantile can land on a higher order statistic, and the maximum takes the
    # worst). Either is exceeded only when its whole interval is above the threshold.
    if all(
        (high if label.startswith("median") else value) <= limit
        for label, value, _, high, limit in checks
    ):
        return Verdict.WITHIN, f"within the thresholds ({figures})"
    above = [check for check in checks if check[2] > check[4]]
    if above:
        return Verdict.EXCEEDED, "exceeded: " + "; ".join(figure(*check) for check in above)
    straddling = [
        check
        for check in checks
        if check[2] <= check[4] < (check[3] if check[0].startswith("median") else check[1])
    ]
    return (
        Verdict.INCONCLUSIVE,
        "inconclusive: the repeats were too noisy to tell ("
        + "; ".join(figure(*check) for check in straddling)
        + f"; median step spread {summary.median_time_spread:.1%}); measure longer with "
        "--repeat-until-stable",
    )


def _figures(
    out: Path,
    cases: Sequence[CaseResult],
    predictions: Sequence[dict[RunKey, RoundPrediction]],
) -> dict[str, str]:
    from plots import predicted_vs_measured_figure, save, side_by_side_figure, speedup_figure

    figures = {}
    records = [r.to_json() for case in cases for r in case.records]
    if records:
        save(predicted_vs_measured_figure(records), out / "predicted_vs_measured.png")
        figures["Predicted vs measured step time"] = "predicted_vs_measured.png"
        save(speedup_figure(records), out / "speedup.png")
        figures["Speedup against M"] = "speedup.png"
    for case in cases[:1]:
        pick = _timeline_pick(case)
        if pick is None:
            continue
        key, measured = pick
        simulated = _simulated_bars(case, key, predictions[0])
        save(
            side_by_side_figure(
                [(f"measured: {key}", measured, []), (f"simulated: {key}", simulated, [])]
            ),
            out / "timelines.png",
        )
        figures[f"Measured and simulated timelines ({key})"] = "timelines.png"
    return figures


def _timeline_pick(case: CaseResult) -> tuple[str, list[tuple[int, str, float, float]]] | None:
    timelines = {f"{r.schedule}/{r.microbatches}": r.timeline for r in case.measurement.runs}
    for key in ("1f1b/4", "zb-h1/4", *timelines):
        if timelines.get(key):
            rows = timelines[key]
            start = min(r[3] for r in rows)
            return key, [(r[0], r[2] or "opt", r[3] - start, r[4] - start) for r in rows]
    return None


def _simulated_bars(
    case: CaseResult, key: str, predictions: dict[RunKey, RoundPrediction]
) -> list[tuple[int, str, float, float]]:
    name, m = key.split("/")
    record = next(r for r in case.records if r.schedule == name and r.microbatches == int(m))
    _, result = predictions[(name, int(m), record.chunks)].representative(case.statistic)
    return [(r.device, r.label, r.start_s, r.end_s) for r in result.compute if r.action]
