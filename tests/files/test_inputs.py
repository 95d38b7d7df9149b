"""Reading input files: pipes and devices are read as streams, so a named pipe that no program
opens for writing is one line after a bounded wait instead of a command waiting for ever,
while a writer that is there is waited for however slow it is."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

import pipesim.files.inputs
from pipesim.errors import PipesimError
from pipesim.files.inputs import NoWriter, read_at_most, read_input
from tests.cli.test_schedule_cli import run

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")

GPIPE_CSV = "0F0,0F1,0B1,0B0\n1F0,1F1,1B1,1B0\n"


@pytest.fixture
def short_wait(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(pipesim.files.inputs, "PIPE_OPEN_WAIT_S", 0.3)
    return 0.3


def _write_later(
    path: Path, parts: list[bytes], pause_s: float, open_after_s: float = 0.05
) -> threading.Thread:
    """A writer that opens ``path`` after ``open_after_s`` and sends ``parts`` ``pause_s``
    apart."""

    def write() -> None:
        time.sleep(open_after_s)
        with path.open("wb") as handle:
            for index, part in enumerate(parts):
                if index:
                    time.sleep(pause_s)
                handle.write(part)
                handle.flush()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return writer


def test_a_named_pipe_nobody_opens_is_refused_after_the_wait(
    tmp_path: Path, short_wait: float
) -> None:
    fifo = tmp_path / "in.csv"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(PipesimError) as caught:
        read_input(fifo, "schedule")
    assert short_wait <= time.monotonic() - started < short_wait + 2
    assert str(caught.value) == (
        f"schedule file {str(fifo)!r}: cannot read it (a named pipe that no program opened for "
        "writing in 0.3 s)"
    )


def test_a_writer_that_opens_in_time_is_waited_for_however_slow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer opens well within the bound (1 s), then pauses between parts for longer
    than it."""
    monkeypatch.setattr(pipesim.files.inputs, "PIPE_OPEN_WAIT_S", 1.0)
    fifo = tmp_path / "in.csv"
    os.mkfifo(fifo)
    writer = _write_later(fifo, [b"a" * 100_000, b"b", b"c"], pause_s=1.2)
    started = time.monotonic()
    assert read_at_most(fifo, 1 << 20) == b"a" * 100_000 + b"bc"
    assert time.monotonic() - started > 2.0  # two pauses, each past the bound
    writer.join()


def test_a_writer_that_comes_and_goes_between_two_looks_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race a reader must not lose: a writer opens, writes and closes right after an
    empty read of a pipe nobody had opened."""
    fifo = tmp_path / "in.csv"
    os.mkfifo(fifo)
    real_read = os.read
    raced: list[bool] = []

    def racing_read(descriptor: int, size: int) -> bytes:
        data = real_read(descriptor, size)
        if data == b"" and not raced:
            raced.append(True)
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.write(writer, b"0F0\n")
            os.close(writer)
        return data

    monkeypatch.setattr(os, "read", racing_read)
    assert read_at_most(fifo, 100) == b"0F0\n"
    assert raced == [True]


def test_a_writer_that_is_silent_after_opening_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipesim.files.inputs, "PIPE_OPEN_WAIT_S", 1.0)
    fifo = tmp_path / "in.csv"
    os.mkfifo(fifo)

    def silent_then_write() -> None:
        with fifo.open("wb") as handle:
            time.sleep(1.5)  # longer than the bound, after opening
            handle.write(b"late")

    writer = threading.Thread(target=silent_then_write, daemon=True)
    writer.start()
    assert read_at_most(fifo, 100) == b"late"
    writer.join()


def test_a_silent_writer_is_said_once_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wait with no bound is one the user sees: one line, once, however long the silence."""
    monkeypatch.setattr(pipesim.files.inputs, "SILENT_WRITER_NOTE_S", 0.3)
    fifo = tmp_path / "in.csv"
    os.mkfifo(fifo)

    def silent_then_write() -> None:
        with fifo.open("wb") as handle:
            time.sleep(1.6)  # the note at 0.3 s; the loop looks every second after it
            handle.write(b"late")

    writer = threading.Thread(target=silent_then_write, daemon=True)
    writer.start()
    assert read_at_most(fifo, 100) == b"late"
    writer.join()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"pipesim: note: waiting for the program writing {str(fifo)!r}: it opened the pipe"
    )


def test_a_pipe_is_read_up_to_the_bound_and_no_further(tmp_path: Path) -> None:
    fifo = tmp_path / "in"
    os.mkfifo(fifo)
    writer = _write_later(fifo, [b"x" * 5000], pause_s=0.0)
    assert read_at_most(fifo, 1000) == b"x" * 1000
    writer.join()


@pytest.mark.skipif(sys.platform != "linux", reason="/dev/null and /dev/zero as on Linux")
def test_devices_end_or_are_cut_at_the_bound() -> None:
    assert read_at_most("/dev/null", 10) == b""
    assert read_at_most("/dev/zero", 10) == b"\0" * 10


def test_no_writer_is_an_os_error_with_its_reason(short_wait: float) -> None:
    error = NoWriter()
    assert isinstance(error, OSError)
    assert error.strerror == "a named pipe that no program opened for writing in 0.3 s"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["schedule", "check", "FIFO"], "schedule file 'FIFO'"),
        (["schedule", "show", "--schedule-file", "FIFO"], "schedule file 'FIFO'"),
        (["plot", "timeline", "FIFO", "--out", "OUT"], "FILE 'FIFO'"),
    ],
)
def test_every_reader_of_a_file_bounds_its_wait_for_a_pipe(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    short_wait: float,
    argv: list[str],
    message: str,
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    argv = [
        str(fifo) if a == "FIFO" else str(tmp_path / "t.png") if a == "OUT" else a for a in argv
    ]
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert err == (
        f"pipesim: error: {message.replace('FIFO', str(fifo))}: cannot read it (a named pipe "
        "that no program opened for writing in 0.3 s)\n"
    )


def test_a_schedule_from_a_pipe_with_a_writer_is_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fifo = tmp_path / "s.csv"
    os.mkfifo(fifo)
    writer = _write_later(fifo, [GPIPE_CSV.encode()], pause_s=0.0)
    status, out, _ = run(capsys, "schedule", "check", str(fifo))
    writer.join()
    assert status == 0 and "valid: K=2 devices, M=2 micro-batches" in out
