"""``python -m validation.layer_timing --report``: a record is read through the project's
bounded, typed readers, and everything wrong with it is one line on stderr naming the file and
the field, exit 2: never a traceback, a wait without end, a read without end, or a report of
numbers no measurement gives."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipesim.common.limits import Limit, limit
from validation.layer_timing import MAX_RECORD_ROWS, main

PROG = "python -m validation.layer_timing"
STORED = Path(__file__).parents[2] / "docs" / "measurements" / "h200-layers.json"


def _stored() -> dict[str, Any]:
    record: dict[str, Any] = json.loads(STORED.read_text())
    return record


def _refusal(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``--report path`` prints on stderr, after its exit 2 (nothing on stdout)."""
    assert main(["--report", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    prefix = f"{PROG}: error: --report file {str(path)!r}: "
    assert line.startswith(prefix)
    return line.removeprefix(prefix)


def _write(tmp_path: Path, change: Callable[[dict[str, Any]], object]) -> Path:
    record = copy.deepcopy(_stored())
    change(record)
    path = tmp_path / "layers.json"
    path.write_text(json.dumps(record))
    return path


def test_the_stored_record_reads() -> None:
    assert main(["--report", str(STORED)]) == 0


def test_a_triad_of_zero_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, lambda r: r["bandwidth"].update(triad_bytes_per_s=0))
    assert _refusal(path, capsys) == (
        "record.bandwidth.triad_bytes_per_s must be a finite number > 0, got 0"
    )


def test_measured_times_of_zero_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, lambda r: r["cases"][0]["fused"].update(forward_s=0, backward_s=0))
    assert _refusal(path, capsys) == (
        "record.cases[0].fused.forward_s must be a finite number > 0, got 0"
    )


def test_an_unknown_attention_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, lambda r: r["cases"][2].update(attention="sparse"))
    assert _refusal(path, capsys) == (
        "record.cases[2].attention must be one of eager, flash, got 'sparse'"
    )


def test_deeply_nested_json_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "layers.json"
    path.write_text('{"cases": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert _refusal(path, capsys) == "not JSON (nested too deeply)"


@pytest.mark.timeout(20)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_named_pipe_without_a_writer_is_given_up_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pipesim.files.inputs.PIPE_OPEN_WAIT_S", 0.3)
    fifo = tmp_path / "layers.json"
    os.mkfifo(fifo)
    assert _refusal(fifo, capsys) == (
        "cannot read it (a named pipe that no program opened for writing in 0.3 s)"
    )


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_dev_zero_is_read_no_further_than_the_limit(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIPESIM_MAX_INPUT_BYTES", str(1 << 20))
    assert _refusal(Path("/dev/zero"), capsys) == (
        "more than 1,048,576 bytes: beyond the limit of 1,048,576 bytes; set "
        "PIPESIM_MAX_INPUT_BYTES to raise it"
    )


def test_a_file_beyond_the_size_limit_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bound = limit(Limit.INPUT_BYTES)
    path = tmp_path / "layers.json"
    with path.open("wb") as handle:
        handle.truncate(bound + 1)  # sparse: nothing written
    assert _refusal(path, capsys).startswith(f"more than {bound:,} bytes")


def test_more_rows_than_a_record_holds_are_refused_before_they_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, lambda r: r.update(cases=r["cases"][:1] * (MAX_RECORD_ROWS + 1)))
    assert _refusal(path, capsys).startswith(
        f"record.cases holds {MAX_RECORD_ROWS + 1:,} rows, more than {MAX_RECORD_ROWS:,}"
    )


def test_a_microbatch_size_of_zero_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, lambda r: r["cases"][0].update(microbatch_size=0))
    assert _refusal(path, capsys) == (
        "record.cases[0].microbatch_size must be a whole number > 0, got 0"
    )


def test_a_negative_stash_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, lambda r: r["cases"][1]["eager"].update(stash_bytes=-1.0))
    assert _refusal(path, capsys) == (
        "record.cases[1].eager.stash_bytes must be a finite number > 0, got -1.0"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.pop("bandwidth"), "record: field 'bandwidth' is missing"),
        (lambda r: r.update(cases=[]), "record.cases must not be empty"),
        (
            lambda r: r["cases"][0].update(tensor=5),
            "record.cases[0]: tensor_parallel 5 must divide the model's heads (24)",
        ),
        (
            lambda r: r["cases"][0]["fused"].update(forward_s=5e-324, backward_s=0),
            "record.cases[0]: ",
        ),
        (
            lambda r: r["square_matmuls"][0].update(flops_per_s=float("nan")),
            "record.square_matmuls[0].flops_per_s must be a finite number > 0, got nan",
        ),
        (
            lambda r: r["cases"][0]["arch"].update(heads="24"),
            "record.cases[0].arch.heads must be a whole number > 0, got '24'",
        ),
    ],
)
def test_every_refusal_of_a_record_is_one_line_without_usage(
    change: Callable[[dict[str, Any]], object],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What is wrong with the record's content is no misuse of the options: one line, no
    argparse usage block, whatever the fault."""
    assert _refusal(_write(tmp_path, change), capsys).startswith(message)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--hardware", "no-such-gpu"], "--hardware: unknown hardware 'no-such-gpu'"),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
    ],
)
def test_a_misused_option_is_one_line_too(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The options' own errors are the project's parser's: one line, pointing at --help."""
    with pytest.raises(SystemExit) as exit_:
        main(["--report", str(STORED), *arguments])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{PROG}: error: {message}")
    assert line.endswith(f"(see {PROG} --help)")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_ctrl_c_while_the_report_waits_is_one_line_exit_130(tmp_path: Path) -> None:
    """As a command of its own, the module ends an interrupt as pipesim's commands do (it
    printed a 24-line traceback and died of the signal)."""
    import signal
    import subprocess
    import sys
    import time

    fifo = tmp_path / "record.json"
    os.mkfifo(fifo)

    def terminal_ctrl_c() -> None:  # whatever started the suite, Ctrl-C as a terminal has it
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    process = subprocess.Popen(
        [sys.executable, "-m", "validation.layer_timing", "--report", str(fifo)],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=terminal_ctrl_c,
    )
    ready = time.monotonic() + 60  # torch's import, on a busy machine
    while time.monotonic() < ready and process.poll() is None:
        fds = Path(f"/proc/{process.pid}/fd")
        try:
            if any(os.readlink(fd) == str(fifo) for fd in fds.iterdir()):
                break
        except OSError:
            pass
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert (process.returncode, out) == (130, "")
    assert err == "python -m validation.layer_timing: interrupted (Ctrl-C)\n"
