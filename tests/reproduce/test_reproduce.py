"""Every reproduction suite writes its table, CSV, figures and README; key numbers pinned."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from cli.main import main
from pipesim.errors import PipesimError
from validation.reproduce import experiment_names, reproduce
from validation.reproduce.framework import CSV_COLUMNS, Outcome, Row, summary_lines

PAPERS = {
    "gpipe": "arXiv 1811.06965",
    "pipedream-2bw": "arXiv 2006.09503",
    "zero-bubble": "arXiv 2401.10241",
    "interleaved": "arXiv 2104.04473",
    "megatron": "arXiv 2104.04473",
    "published": "arXiv 2201.11990",
    "deepseek-v3": "arXiv 2412.19437",
}


# The zero-bubble suite spends most of its time synthesising schedules: for Table 5's twelve
# settings (about 35 s on a quiet 2-core machine, many minutes under load) and for the
# controllable-memory rows at p = 4, 6, 8 (about 7 s quiet, 26 s at a load of 8). The default
# run reproduces three Table 5 settings, (model, m): p = 8 and 16, about 2 s, and the
# controllable-memory rows at p = 4; everything runs under `pytest -m bench`.
REDUCED_TABLE_5 = (("1.5B", 24), ("6.2B", 32), ("14.6B", 48))
REDUCED_DEPTHS = (4,)


@contextmanager
def zero_bubble_table_5(
    settings: Sequence[tuple[str, int]] | None, depths: Sequence[int] | None = None
) -> Iterator[None]:
    """The zero-bubble suite run on Table 5's rows of these (model, m) ``settings`` only and
    the controllable-memory rows of these pipeline ``depths`` only (None: all of them)."""
    from validation.reproduce import zero_bubble

    with pytest.MonkeyPatch.context() as patch:
        if settings is not None:
            entries = [e for e in zero_bubble.TABLE_5 if (e[0], e[2]) in settings]
            assert len(entries) == len(settings)
            patch.setattr(zero_bubble, "TABLE_5", entries)
        if depths is not None:
            assert set(depths) <= set(zero_bubble.CONTROLLABLE_DEPTHS)
            patch.setattr(zero_bubble, "CONTROLLABLE_DEPTHS", tuple(depths))
        cached = (zero_bubble.table_5_rows, zero_bubble.controllable_memory_rows)
        for rows in cached:  # each computed once per process, from the constants above
            rows.cache_clear()
        try:
            yield
        finally:
            for rows in cached:
                rows.cache_clear()


@pytest.fixture(scope="module")
def reduced_zero_bubble_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Outcome, dict[str, Path]]:
    """The reduced zero-bubble suite, run once for every test that reads it."""
    with zero_bubble_table_5(REDUCED_TABLE_5, REDUCED_DEPTHS):
        return reproduce("zero-bubble", tmp_path_factory.mktemp("zero-bubble") / "out")


def run_suite(
    request: pytest.FixtureRequest, name: str, table_5: object, out: Path
) -> tuple[Outcome, dict[str, Path]]:
    """Suite ``name`` written into ``out``; the zero-bubble suite reduced (``table_5`` not
    None) is the module's one run instead, or everything under ``-m bench`` (None)."""
    if name != "zero-bubble":
        return reproduce(name, out)
    if table_5 is not None:
        run: tuple[Outcome, dict[str, Path]] = request.getfixturevalue("reduced_zero_bubble_run")
        return run
    with zero_bubble_table_5(None, None):
        return reproduce(name, out)


def test_the_suites_of_the_issue_are_registered() -> None:
    assert set(experiment_names()) == set(PAPERS)


SUITES = [
    *(
        pytest.param(name, REDUCED_TABLE_5 if name == "zero-bubble" else None, id=name)
        for name in sorted(PAPERS)
    ),
    pytest.param("zero-bubble", None, id="zero-bubble-full", marks=pytest.mark.bench),
]


@pytest.mark.parametrize(("name", "table_5"), SUITES)
def test_each_suite_writes_table_csv_figures_and_readme(
    name: str,
    table_5: Sequence[tuple[str, int]] | None,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """(zero-bubble on three of Table 5's settings; all of them under ``-m bench``.)"""
    outcome, paths = run_suite(request, name, table_5, tmp_path / "out")
    folder = paths["csv"].parent
    rows = list(csv.DictReader(paths["csv"].open()))
    assert tuple(rows[0]) == CSV_COLUMNS
    for row, cell in zip(rows, outcome.rows, strict=True):  # issue 37: every measured cell
        if cell.paper is not None:  # says whether it is in-sample, and why
            assert cell.sample is not None and cell.sample_why
            assert row["sample"] in ("in-sample", "out-of-sample", "formula")
    assert len(rows) == len(outcome.rows) > 0
    for row, cell in zip(rows, outcome.rows, strict=True):
        if cell.ratio is not None:
            assert float(row["ratio"]) == pytest.approx(
                float(row["simulated"]) / float(row["paper"])
            )
    table = paths["table"].read_text()
    assert (
        table.startswith("# ")
        and "| model | hardware | K | M | quantity | paper | pipesim |" in table
    )
    readme = paths["readme"].read_text()
    assert PAPERS[name] in readme
    if name in ("megatron", "published"):  # issue 37: each recipe choice's effect, printed
        from pipesim.config import CHOICES

        assert "## Sensitivity" in readme
        assert all(f"recipe.{choice}" in readme for choice in CHOICES)
    assert (
        "## Setup and assumptions" in readme and "## What agrees, what does not, and why" in readme
    )
    assert outcome.figures
    for file in outcome.figures.values():
        assert (folder / file).stat().st_size > 5000
        assert f"]({file})" in table


def ratios(name: str, tmp_path: Path, table: str) -> list[float]:
    outcome, _ = reproduce(name, tmp_path)
    return [r.ratio for r in outcome.rows if r.table == table and r.ratio is not None]


def test_zero_bubble_and_interleaved_formulas_hold_exactly(
    tmp_path: Path, reduced_zero_bubble_run: tuple[Outcome, dict[str, Path]]
) -> None:
    outcome, paths = reduced_zero_bubble_run  # its checks read no row of Table 5
    zb = [
        r.ratio
        for r in outcome.rows
        if r.table == "Bubble rate at T_F = T_B = T_W" and r.ratio is not None
    ]
    assert zb and all(r == pytest.approx(1.0) for r in zb)
    # Where the formula says the bubble vanishes (ZB-H2, ZB-V), no ratio exists: the
    # difference must be zero instead.
    vanishing = [r for r in outcome.rows if r.paper == 0]
    assert len(vanishing) == 10 + len(REDUCED_DEPTHS)  # ZB-H2's and ZB-V's, V-ZB's per p
    assert {r.model for r in vanishing} == {"zb-h2", "zbv", "V-ZB: synth at 1F1B's memory"}
    assert all(r.difference == pytest.approx(0.0, abs=1e-12) for r in vanishing)
    cells = list(csv.DictReader(paths["csv"].open()))
    zero_cells = [c for c in cells if c["paper"] and float(c["paper"]) == 0]
    assert len(zero_cells) == len(vanishing) and all(
        float(c["difference"]) == 0 for c in zero_cells
    )
    memory = [
        r.ratio
        for r in outcome.rows
        if r.table == "Table 2: peak activation memory (in M_B)" and r.ratio is not None
    ]
    assert memory and all(r == pytest.approx(1.0) for r in memory)
    bubble = ratios("interleaved", tmp_path / "il", "Bubble (fraction of the ideal time)")
    assert len(bubble) == 24 and all(r == pytest.approx(1.0) for r in bubble)


@pytest.mark.parametrize(
    ("table_5", "count"),
    [
        pytest.param(REDUCED_TABLE_5, 18, id="three-settings"),
        pytest.param(None, 72, id="full", marks=pytest.mark.bench),
    ],
)
def test_zero_bubble_table_5_on_its_profiled_times(
    table_5: Sequence[tuple[str, int]] | None,
    count: int,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """1F1B, ZB-H1 and ZB-H2 as built, and the synthesised schedule at p micro-batches in
    flight against ZB-1p, give the published bubble rates to their four printed digits (the
    paper's cost is the largest stage span); at 2p with the paper's finer memory count
    (M_W/M_B) the synthesised schedule (per-stage warm-up counts, then searched) gives ZB-2p's
    rates to their four printed digits but for 1.5B at m=24 (4.46% against 4.33%), and with
    the coarse count (a micro-batch in flight until its W) it stays above (what that count
    lacks is in the note). Six rows per setting: three of the twelve by default, all of them
    under ``-m bench``."""
    from validation.reproduce.zero_bubble import TABLE_5_NAME

    outcome, _ = run_suite(request, "zero-bubble", table_5, tmp_path / "out")
    rows = [r for r in outcome.rows if r.table == TABLE_5_NAME]
    assert len(rows) == count
    for row in rows:
        assert row.paper is not None and row.simulated is not None
        if row.model.startswith("ZB-2p: synth N=2p"):
            assert row.simulated > row.paper
            continue
        allowed = 0.0013 if row.model.startswith("ZB-2p") and row.paper == 0.0433 else 0.00006
        assert abs(row.simulated - row.paper) <= allowed, (
            row.model,
            row.hardware,
            row.microbatches,
        )


def test_zero_bubble_profiled_times_against_the_time_model() -> None:
    """Table 9's per-stage times beside pipesim's on an A100, four models: the backward's
    split is right (the input gradient within 10%, W within 15% above: one efficiency for
    every pass made W 1.5x too slow), the forward within 15% below (it was 13% to 20% short
    while softmax, norms and dropout were timed at the triad's bandwidth), every row named and
    in milliseconds. The T_comm bound is a REGRESSION LOCK, not an accuracy target: the
    per-message overhead was fitted to this column, and each T_comm row says it is in-sample."""
    from validation.reproduce.zero_bubble import profiled_time_rows

    rows = profiled_time_rows()
    assert len(rows) == 16 and {r.model for r in rows} == {"1.5B", "6.2B", "14.6B", "28.3B"}
    ratio = {(r.model, r.quantity): r.ratio or math.nan for r in rows}
    for model in ("1.5B", "6.2B", "14.6B", "28.3B"):
        assert 0.95 <= ratio[model, "T_B (input gradient)"] <= 1.1
        assert 1.0 <= ratio[model, "T_W"] <= 1.15
        assert 0.85 <= ratio[model, "T_F"] <= 1.0
        assert 0.5 <= ratio[model, "T_comm"] <= 0.8  # regression lock (in-sample)
    in_sample = [r for r in rows if "IN-SAMPLE" in (r.note or "")]
    assert {r.quantity for r in in_sample} == {"T_comm"} and len(in_sample) == 4


def test_megatron_table_1_regression_lock_in_sample() -> None:
    """A REGRESSION LOCK, not an accuracy target: 2104.04473 Table 1 and 2205.05198 Tables 4
    and 5 are in-sample (the recipes' unfused accumulation and blocking messages and three
    memory-bound kernel classes were added after these tables said the model was too fast,
    and this test was written once it passed). It holds the median error on Table 1's
    teraFLOP/s per GPU under 5% and no row above 10%, and Tables 4 and 5 within 15%, so that
    a change of the time model that moves them says so. The accuracy target is the published
    suite's out-of-sample one (tests/reproduce/test_published.py)."""
    from validation.reproduce.megatron import table_1_rows, table_4_rows, table_5_rows

    rows = table_1_rows()
    assert [r.model for r in rows] == [
        f"megatron-{size}"
        for size in (
            "1.7b",
            "3.6b",
            "7.5b",
            "18.4b",
            "39.1b",
            "76.1b",
            "145.6b",
            "310.1b",
            "529.6b",
            "1t",
        )
    ]
    errors = sorted(abs((r.ratio or math.nan) - 1) for r in rows)
    assert (errors[4] + errors[5]) / 2 < 0.05 and errors[-1] < 0.10, errors
    for row in table_4_rows() + table_5_rows():
        assert 0.85 <= (row.ratio or math.nan) <= 1.15, (row.model, row.quantity, row.ratio)


@pytest.mark.parametrize(
    ("table_5", "depths"),
    [
        pytest.param(REDUCED_TABLE_5, REDUCED_DEPTHS, id="p4"),
        pytest.param(None, (4, 6, 8), id="full", marks=pytest.mark.bench),
    ],
)
def test_the_controllable_memory_v_schedules(
    table_5: Sequence[tuple[str, int]] | None,
    depths: tuple[int, ...],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """2405.15362: every peak equals its formula; V-ZB has no bubble; V-Min's rate is within
    2 points of 2B/3; the synthesis at V-Half's memory is never worse than V-Half's block."""
    from validation.reproduce.zero_bubble import CONTROLLABLE_NAME

    outcome, _ = run_suite(request, "zero-bubble", table_5, tmp_path / "out")
    rows = [r for r in outcome.rows if r.table == CONTROLLABLE_NAME]
    assert len(rows) == 8 * len(depths)  # four schedules, a peak and a rate each, per p
    memory = [r for r in rows if r.quantity.startswith("peak")]
    assert len(memory) == 4 * len(depths) and all(r.simulated == r.paper for r in memory)
    rate = {(r.model, r.devices): r for r in rows if r.quantity == "bubble rate"}
    for p in depths:
        assert rate["V-ZB: synth at 1F1B's memory", p].simulated == pytest.approx(0.0, abs=1e-12)
        v_min = rate["V-Min (building block)", p]
        assert abs((v_min.simulated or 0) - (v_min.paper or 0)) < 0.02
        synthesised = rate["synth at V-Half's memory", p].simulated or 0
        assert synthesised <= (rate["V-Half (building block)", p].simulated or 0) + 1e-12


def test_gpipe_transformer_sizes_match_table_1(tmp_path: Path) -> None:
    outcome, _ = reproduce("gpipe", tmp_path)
    transformer = [
        r
        for r in outcome.rows
        if r.model.startswith("gpipe-transformer-") and r.model[-1].isdigit()
    ]
    parameters = [r.ratio or 0.0 for r in transformer if r.quantity == "parameters"]
    assert len(parameters) == 5 and all(abs(r - 1) < 0.01 for r in parameters)
    pipelined = [
        r.ratio or 0.0
        for r in transformer
        if r.quantity.startswith("parameter memory") and r.microbatches != 1
    ]
    assert len(pipelined) == 4 and all(abs(r - 1) < 0.01 for r in pipelined)
    bubble = [r for r in outcome.rows if r.table.startswith("Bubble")]
    assert [round(r.simulated or 0, 3) for r in bubble] == [0.111, 0.158, 0.179]


def test_pipedream_2bw_memory_order_and_fit_on_16_gib(tmp_path: Path) -> None:
    outcome, _ = reproduce("pipedream-2bw", tmp_path)
    fits = {
        (r.model, r.quantity.split(":")[0]): r.note
        for r in outcome.rows
        if r.table.startswith("Fits in 16 GiB")
    }
    assert len(fits) == 8
    # Only PipeDream's stashed weight versions overflow a 16 GiB V100, and only for 3.8B.
    assert [key for key, note in fits.items() if note != "fits"] == [("gpt-3.8b", "PipeDream")]
    formula = {
        r.quantity.split(":")[0]: r.simulated
        for r in outcome.rows
        if r.model == "gpt-2.2b" and r.table.startswith("Per-worker memory")
    }
    # The paper's ordering: GPipe with recompute < 2BW < PipeDream-Flush < PipeDream.
    order = ["GPipe", "2BW", "PipeDream-Flush", "PipeDream"]
    assert sorted(formula, key=lambda name: formula[name] or 0) == order


def test_unknown_suite(tmp_path: Path) -> None:
    with pytest.raises(PipesimError, match=r"^unknown reproduction 'tpu'; choose one of: gpipe, "):
        reproduce("tpu", tmp_path)


def test_cli_reproduce(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = tmp_path / "cwd"  # a bad --out that fell back to "." would write here, not in the repo
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["reproduce", "--list"]) == 0
    listed = capsys.readouterr().out
    assert listed.splitlines()[0].startswith("gpipe")
    assert main(["reproduce", "interleaved", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Megatron-LM interleaved 1F1B (arXiv 2104.04473) reproduced with pipesim")
    assert f"table: {tmp_path / 'table.md'}" in out
    assert main(["reproduce", "interleaved", "--out", ""]) == 2
    assert capsys.readouterr().err == "pipesim: error: --out must name a directory, got ''\n"
    assert list(cwd.iterdir()) == []
    (tmp_path / "file").write_text("")
    assert main(["reproduce", "interleaved", "--out", str(tmp_path / "file" / "sub")]) == 2
    assert "cannot create" in capsys.readouterr().err
    assert main(["reproduce", "gpipe", "--out", "/proc/x"]) == 2
    assert capsys.readouterr().err.startswith("pipesim: error: --out: cannot create '/proc/x'")
    assert main(["reproduce"]) == 2
    assert capsys.readouterr().err == (
        "pipesim: error: NAME is required (see pipesim reproduce --list)\n"
    )
    assert main(["reproduce", "--list", "gpipe"]) == 2
    assert capsys.readouterr().err == (
        "pipesim: error: --list lists every suite and takes no NAME, got 'gpipe'\n"
    )


def test_the_main_job_runs_where_torch_is_not_installed(tmp_path: Path) -> None:
    """README's first command installs pipesim without torch, then runs `reproduce gpipe`."""
    code = (
        "import sys; sys.modules['torch'] = None  # any import of torch now fails\n"
        "from cli.main import main\n"
        f"sys.exit(main(['reproduce', 'gpipe', '--out', {str(tmp_path)!r}]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "table.md").exists() and (tmp_path / "README.md").exists()


def test_summaries_leave_out_cells_equal_by_construction_and_count_the_rest() -> None:
    table = "Table 2: normalized throughput"
    rows = [
        Row(table, "m", "hw", 2, 1, "q", 1.0, 1.0, by_construction=True),
        Row(table, "m", "hw", 2, 1, "q", 1.0, 1.0, by_construction=True),
        Row(table, "m", "hw", 4, 4, "q", 2.0, 1.16),
        Row(table, "m", "hw", 8, 4, "q", 2.0, 1.96),
        Row(table, "m", "hw", 8, 4, "q", 2.0, 2.0),
        Row(table, "m", "hw", 8, 32, "q", 2.0, 3.72),
        Row("Bubble", "m", "hw", 8, 32, "q", 0.0, 0.001),
        Row("Only pipesim", "m", "hw", 8, 32, "q", None, 3.0),
    ]
    assert summary_lines(rows) == [
        f"{table}: 4 cells, pipesim/paper 0.58 to 1.86, median 0.99; 2 baseline cells equal to "
        "the paper by construction left out",
        "Bubble: 1 where the paper has 0: pipesim within 0.001",
    ]


def test_gpipe_summaries_exclude_the_baselines(tmp_path: Path) -> None:
    outcome, paths = reproduce("gpipe", tmp_path)
    baselines = [r for r in outcome.rows if r.by_construction]
    assert [(r.table[:7], r.devices, r.microbatches) for r in baselines] == [
        ("Table 2", 2, 1),
        ("Table 2", 2, 1),
        ("Table 3", 2, 32),
        ("Table 3", 2, 32),
    ]
    lines = {line.split(":")[0]: line for line in summary_lines(outcome.rows)}
    assert lines["Table 2"].startswith("Table 2: normalized throughput (TPU): 16 cells")
    assert lines["Table 3"].startswith("Table 3: normalized throughput (P100, PCIe): 4 cells")
    assert "2 baseline cells equal to the paper by construction left out" in lines["Table 3"]
    assert "16 cells" in paths["readme"].read_text()


def test_cells_derived_from_a_step_time_are_shown_but_not_counted_as_agreements() -> None:
    """2205.05198 Table 5's MFU and HFU follow from the same run's step time: counting them
    counted one agreement three times (issue 37)."""
    from validation.reproduce.megatron import TABLE_5_NAME, table_5_rows

    rows = table_5_rows()
    derived = [r for r in rows if r.derived]
    assert derived and {r.quantity.split(",")[0] for r in derived} == {"MFU", "HFU"}
    assert all(not r.derived for r in rows if r.quantity.startswith("seconds per step"))
    line = next(x for x in summary_lines(rows) if x.startswith(TABLE_5_NAME))
    steps = sum(1 for r in rows if not r.derived)
    assert line.startswith(f"{TABLE_5_NAME}: {steps} cells, ")
    assert f"{len(derived)} derived cells (following from another cell of the same run)" in line


def test_an_outcome_refuses_a_measured_cell_without_a_sample_label() -> None:
    with pytest.raises(ValueError, match="no sample label"):
        Outcome("t", [Row("Table", "m", "hw", 2, 1, "q", 1.0, 1.1)], "readme")
    Outcome("t", [Row("Table", "m", "hw", 2, 1, "q", None, 1.1)], "readme")  # nothing to label


def test_the_headline_line_counts_out_of_sample_cells_only() -> None:
    from validation.reproduce.framework import Sample, sample_headline

    rows = [
        Row("A", "m", "hw", 2, 1, "q", 1.0, 1.5, sample=Sample.IN, sample_why="set from it"),
        Row("B", "m", "hw", 2, 1, "q", 1.0, 1.1, sample=Sample.OUT, sample_why="not used"),
        Row("B", "m", "hw", 2, 1, "q", 1.0, 0.8, sample=Sample.OUT, sample_why="not used"),
        Row("C", "m", "hw", 2, 1, "q", 1.0, 3.0, sample=Sample.FORMULA, sample_why="closed form"),
    ]
    assert sample_headline(rows) == (
        "out-of-sample: 2 cells, |pipesim/paper - 1| mean 15.0%, max 20.0% (1 in-sample "
        "cell left out)"
    )
    assert sample_headline(rows[:1]).startswith("out-of-sample: none; all 1 measured cells")
    assert sample_headline(rows[3:]).startswith("out-of-sample: none; every published value")
    derived = [Row("A", "m", "hw", 2, 1, "q", 1.0, 1.5, sample=Sample.IN, derived=True)]
    assert sample_headline(derived) == ""  # a derived cell is never counted, in or out


def test_deepseek_v3_table_2_and_where_dualpipe_differs(tmp_path: Path) -> None:
    """1F1B's and ZB1P's bubble, and every schedule's parameters and activations, are Table
    2's exactly; DualPipe's bubble is Table 2's minus (PP/2-1)·I: pipesim runs an overlapped
    pair as two actions (F&B = F + B), the forward as soon as its input arrives."""
    from validation.reproduce.deepseek_v3 import BUBBLE

    outcome, _ = reproduce("deepseek-v3", tmp_path / "out")
    assert len(outcome.rows) == 2 * 9 + 2 * 9
    for row in outcome.rows:
        assert row.paper is not None and row.simulated is not None and row.devices is not None
        if row.table == BUBBLE and row.model == "DualPipe":
            input_grad = 1.0  # both settings' I
            expected = row.paper - (row.devices / 2 - 1) * input_grad
            assert row.simulated == pytest.approx(expected, rel=1e-12), row
        else:
            assert row.simulated == pytest.approx(row.paper, rel=1e-12), row
