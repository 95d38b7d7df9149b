"""Every refusal clean: bad input, size limits, non-finite results, unwritable outputs and
Ctrl-C are one line on stderr with the documented exit status (2, 2, 2, 2 or 1, 130), never a
traceback, and nothing is written."""

from __future__ import annotations

import argparse
import errno
import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import application.outputs
from cli import schedule_cmd

from .test_schedule_cli import run

MODEL = (
    'dtype = "bf16"\ndefault_batch = 8\ninput_bytes = 1\n[[layers]]\nname = "a"\nrepeat = {repeat}'
    "\nforward_flops = 1e9\ninput_grad_flops = 1e9\nweight_grad_flops = 1e9\nparameters = 10\n"
    "activation_bytes = 5\noutput_bytes = 1\n"
)
TRANSFORMER = (
    'dtype = "bf16"\ndefault_batch = 8\n[transformer]\nlayers = {layers}\nhidden = 8\nheads = 1\n'
    "seq = 4\nvocab = 10\n"
)


def one_line(err: str) -> str:
    """The single line of ``err``, checked to be a pipesim message and the only line."""
    assert err.startswith("pipesim: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err.rstrip("\n")


def test_binary_toml_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    binary = tmp_path / "x.toml"
    binary.write_bytes(b"name = 'a'\n\x89PNG\r\n\x1a\n\x00\xff")
    for flags in (
        ["--model", str(binary), "--hardware", "a100"],
        ["--model", "uniform-4", "--hardware", str(binary)],
    ):
        status, out, err = run(
            capsys, "simulate", "--schedule", "1f1b", "-K", "2", "-M", "2", *flags
        )
        assert status == 2 and out == ""
        what = "model" if flags[1] == str(binary) else "hardware"
        assert one_line(err) == (
            f"pipesim: error: {what} file {str(binary)!r}: cannot read it (not UTF-8 text: "
            "b'\\x89' at byte 11)"
        )


@pytest.mark.filterwarnings("error::RuntimeWarning")  # no warning lines above the error
def test_non_finite_results_are_refused_and_nothing_is_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    saved = tmp_path / "f.json"
    status, out, err = run(
        capsys, "simulate", "--schedule", "1f1b", "-K", "2", "-M", "2", "--costs", "1e308,1e308",
        "--json", "--save", str(saved),
    )  # fmt: skip
    assert status == 2 and out == "" and not saved.exists()
    assert one_line(err) == (
        "pipesim: error: simulate: iteration_time is inf (the costs overflow a float): give "
        "smaller costs"
    )


def test_json_output_is_strict() -> None:
    from pipesim.errors import PipesimError
    from pipesim.files.strict_json import json_text

    assert json_text({"a": [1.5, None]}) == '{"a": [1.5, null]}'
    with pytest.raises(PipesimError, match=r"^JSON output: a\[1\] is nan"):
        json_text({"a": [1.0, float("nan")]})


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["schedule", "show", "--schedule", "1f1b", "-K", "8", "-M", "1000000000"],
            "1f1b K=8 M=1,000,000,000 v=1: 16,000,000,000 actions: beyond the limit of "
            "1,048,576 actions; set PIPESIM_MAX_ACTIONS to raise it",
        ),
        (
            ["simulate", "--schedule", "gpipe", "-K", "100000", "-M", "1", "--costs", "1,1"],
            "gpipe K=100,000 M=1 v=1: 100,000 devices: beyond the limit of 1,024 devices; set "
            "PIPESIM_MAX_DEVICES to raise it",
        ),
        (
            ["schedule", "export", "--schedule", "looped-bfs", "-K", "2", "-M", "2", "-v", "1000"],
            "looped-bfs K=2 M=2 v=1000: 1,000 chunks per device: beyond the limit of 64 chunks "
            "per device; set PIPESIM_MAX_CHUNKS to raise it",
        ),
        (
            ["simulate", "--schedule", "1f1b", "-K", "2", "-M", "2", "--costs", "1,1", "--steps",
             "100000000"],
            "--steps 100,000,000 x 8 actions: beyond the limit of 1,048,576 actions; set "
            "PIPESIM_MAX_ACTIONS to raise it",
        ),
        (
            ["bench", "--configs", "1000000000"],
            "--configs 1,000,000,000: beyond the limit of 100,000 configurations; set "
            "PIPESIM_MAX_CONFIGS to raise it",
        ),
    ],
)  # fmt: skip
def test_size_limits_refuse_before_allocating(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert one_line(err) == f"pipesim: error: {expected}"


def test_a_limit_is_raised_by_its_environment_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["schedule", "export", "--schedule", "1f1b", "-K", "2", "-M", "8"]
    monkeypatch.setenv("PIPESIM_MAX_ACTIONS", "31")
    status, _, err = run(capsys, *argv)
    assert status == 2 and "beyond the limit of 31 actions" in err
    monkeypatch.setenv("PIPESIM_MAX_ACTIONS", "32")
    status, out, _ = run(capsys, *argv)
    assert status == 0 and len(out.splitlines()) == 2
    monkeypatch.setenv("PIPESIM_MAX_ACTIONS", "lots")
    status, _, err = run(capsys, *argv)
    assert status == 2
    assert (
        one_line(err) == "pipesim: error: PIPESIM_MAX_ACTIONS must be an integer >= 1, got 'lots'"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            TRANSFORMER.format(layers=10_000_000),
            "transformer.layers = 10,000,000: beyond the limit of 100,000 layers",
        ),
        (MODEL.format(repeat=100_000_000), "layers[0].repeat = 100,000,000: 100,000,000 layers "
         "in all: beyond the limit of 100,000 layers"),
    ],
)  # fmt: skip
def test_model_files_beyond_the_layer_limit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "m.toml"
    path.write_text(text)
    status, _, err = run(
        capsys, "simulate", "--schedule", "1f1b", "-K", "2", "-M", "2", "--model", str(path),
        "--hardware", "a100",
    )  # fmt: skip
    assert status == 2
    assert one_line(err) == (f"pipesim: error: {expected}; set PIPESIM_MAX_LAYERS to raise it")


def test_an_oversized_input_file_is_refused_unread(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "s.csv"
    path.write_text("0F0,0B0\n" * 100)
    monkeypatch.setenv("PIPESIM_MAX_INPUT_BYTES", "500")
    status, _, err = run(capsys, "schedule", "check", str(path))
    assert status == 2
    assert one_line(err) == (
        f"pipesim: error: schedule file {str(path)!r}: more than 500 bytes: beyond the limit of "
        "500 bytes; set PIPESIM_MAX_INPUT_BYTES to raise it"
    )


@pytest.mark.parametrize(
    ("cells", "expected"),
    [
        (
            "9999999F0,9999999B0",
            "{path}: 10,000,000 stages x 1 micro-batches (its largest numbers) need 20,000,000 "
            "actions: beyond the limit of 1,048,576 actions; set PIPESIM_MAX_ACTIONS to raise it",
        ),
        (
            "0F0,0B0,0F9999999,0B9999999",
            "{path}: 1 stages x 10,000,000 micro-batches (its largest numbers) need 20,000,000 "
            "actions: beyond the limit of 1,048,576 actions; set PIPESIM_MAX_ACTIONS to raise it",
        ),
        (
            "0F0,0B0,99F0",
            "{path}: stage(s) 1, 2, 3, 4, 5 and 93 more have no actions, but stage 99 does; "
            "stages must be numbered 0..S-1",
        ),
        (
            "0F0," + "9" * 5000 + "F0",
            "{path} line 1 cell 2: '" + "9" * 76 + "... (5,004 characters) is not of the form "
            "<stage><F|B|I|W><microbatch>, e.g. 2F0",
        ),
    ],
)
def test_hostile_csv_cells_give_a_short_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cells: str, expected: str
) -> None:
    path = tmp_path / "s.csv"
    path.write_text(cells + "\n")
    status, _, err = run(capsys, "schedule", "check", str(path))
    assert status == 2 and len(err) < 400
    assert one_line(err) == "pipesim: error: " + expected.format(path=path)


def test_a_schedule_error_has_a_self_sufficient_first_line_then_the_grid(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "s.csv"
    path.write_text("0F0,0F1,0B1\n1F0,1B0,1F1,1B1\n")
    status, _, err = run(capsys, "schedule", "check", str(path))
    assert status == 2
    first, *grid = err.splitlines()
    assert first == (
        f"pipesim: error: {path}: stage 0 micro-batch 0 has no backward: 0B0 is missing (or "
        "0I0 and 0W0)"
    )
    assert grid[0].startswith("step") and grid[1].startswith("device 0  >0F0<")


def test_validate_out_on_a_read_only_file_system(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setattr(os, "access", lambda *args: False)
    monkeypatch.setattr(application.outputs, "_read_only", lambda directory: True)
    status, out, err = run(capsys, "validate", "--out", str(tmp_path))
    assert status == 2 and out == ""
    assert one_line(err) == (
        f"pipesim: error: --out: cannot write into {str(tmp_path)!r} (read-only file system)"
    )


def test_a_full_disk_while_writing_a_figure_is_exit_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    figure = tmp_path / "t.png"
    figure.write_bytes(b"previous")

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    status, _, err = run(
        capsys, "simulate", "--schedule", "1f1b", "-K", "2", "-M", "2", "--costs", "1,1",
        "--timeline", str(figure),
    )  # fmt: skip
    assert status == 1
    assert one_line(err) == (
        f"pipesim: failed: --timeline: cannot write {str(figure)!r} (No space left on device); "
        "any previous file there is unchanged"
    )
    assert figure.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.png"]


def test_ctrl_c_is_one_line_exit_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(schedule_cmd, "_list", interrupted)
    status, out, err = run(capsys, "schedule", "list")
    assert status == 130 and out == ""
    assert one_line(err) == "pipesim: interrupted (Ctrl-C)"


def test_help_names_every_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "--help")
    assert status == 0
    text = " ".join(out.split())
    assert "0 done; 1 a check or a write failed; 2 bad input" in text
    assert "130 interrupted (Ctrl-C, SIGTERM or SIGHUP)" in text


def test_simulate_json_has_no_nan(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(
        capsys, "simulate", "--schedule", "zbv", "-K", "2", "-M", "4", "--costs", "0,0", "--json"
    )
    assert status in (0, 2)
    if status == 0:
        json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in --json"))


@pytest.mark.parametrize(
    ("costs", "expected"),
    [
        ("0,0", "iteration_time is 0 s (every cost is zero): give costs that take time"),
        (
            "1e300,1e300",
            "iteration_time is 6e+300, beyond 1e+15, the largest number pipesim saves and "
            "plots: give smaller costs or sizes",
        ),
        (
            "1e-300,1e-300",
            "iteration_time is 6e-300, below 1e-12, the smallest positive number pipesim saves "
            "and plots: give larger costs",
        ),
        (
            "1e13,1e13",
            "throughput is 3.33333e-14, below 1e-12, the smallest positive number pipesim "
            "saves and plots: give smaller costs",
        ),
    ],
)
def test_results_pipesim_could_not_read_back_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, costs: str, expected: str
) -> None:
    """Finite but outside what pipesim saves and plots (or zero): refused, nothing saved."""
    saved = tmp_path / "f.json"
    status, out, err = run(
        capsys, "simulate", "--schedule", "1f1b", "-K", "2", "-M", "2", "--costs", costs,
        "--save", str(saved),
    )  # fmt: skip
    assert status == 2 and out == "" and not saved.exists()
    assert one_line(err) == f"pipesim: error: simulate: {expected}"


_COSTS = st.one_of(
    st.just(0.0),
    st.floats(min_value=1e-320, max_value=1e308, allow_nan=False, allow_infinity=False),
    st.sampled_from([1e-13, 1e-12, 1e-6, 1.0, 1e6, 1e12, 1e14, 1e15, 1e16]),
)


@settings(max_examples=25)
@given(forward=_COSTS, backward=_COSTS, microbatches=st.sampled_from([1, 4, 64]))
def test_whatever_simulate_saves_plot_reads_back(
    forward: float, backward: float, microbatches: int
) -> None:
    """Any costs: ``simulate --save`` refuses in one line (exit 2) or writes a file that
    ``pipesim plot``'s loader accepts (the issue's ``--costs 1e308,1e308`` then ``plot
    timeline``)."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from cli.main import main
    from pipesim.export.saved import load_run

    with tempfile.TemporaryDirectory() as folder:
        saved = Path(folder) / "run.json"
        err = io.StringIO()
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            status = main(
                ["simulate", "--schedule", "1f1b", "-K", "2", "-M", str(microbatches),
                 "--costs", f"{forward!r},{backward!r}", "--save", str(saved)]
            )  # fmt: skip
        if status == 0:
            load_run(str(saved))
        else:
            assert status == 2 and not saved.exists()
            one_line(err.getvalue())


@pytest.mark.parametrize("command", ["schedule show", "simulate"])
def test_an_update_rule_for_a_named_schedule_is_refused_not_ignored(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    costs = ["--costs", "1,2"] if command == "simulate" else []
    argv = [*command.split(), "--schedule", "1f1b", "-K", "2", "-M", "2", *costs]
    status, out, err = run(capsys, *argv, "--update-rule", "async")
    assert status == 2 and out == ""
    assert one_line(err) == (
        "pipesim: error: --update-rule async: only for --schedule-file; --schedule 1f1b has its "
        "own update rule"
    )
    assert run(capsys, *argv)[0] == 0
