"""The atomic writers: nothing destroyed (special files, symlinks), modes kept, a failed write
leaves the previous file whole and is one line with exit 1."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import application.outputs
import pipesim.files.inputs
from application.outputs import output_path, umask, write_bytes_atomically, write_text_atomically
from pipesim.errors import OutputError, PipesimError
from tests.cli.test_schedule_cli import run

EXPORT = ["schedule", "export", "--schedule", "gpipe", "-K", "2", "-M", "2"]
GPIPE_CSV = "0F0,0F1,0B1,0B0\n1F0,1F1,1B1,1B0\n"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022() -> object:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_a_new_file_gets_the_umask_mode(tmp_path: Path, umask_022: object) -> None:
    target = tmp_path / "new.txt"
    write_text_atomically(target, "x", field="--out")
    assert target.read_text() == "x" and _mode(target) == 0o644
    os.umask(0o027)
    other = tmp_path / "other.txt"
    write_text_atomically(other, "y", field="--out")
    assert _mode(other) == 0o640


def test_umask_is_read_without_changing_it(umask_022: object) -> None:
    assert umask() == 0o022
    assert umask() == 0o022


def test_overwriting_keeps_the_existing_mode(tmp_path: Path, umask_022: object) -> None:
    for mode in (0o644, 0o600, 0o664, 0o755):
        target = tmp_path / f"f{mode:o}"
        target.write_text("old")
        target.chmod(mode)
        write_text_atomically(target, "new", field="--out")
        assert target.read_text() == "new" and _mode(target) == mode


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real.csv"
    real.write_text("old")
    real.chmod(0o644)
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    status = run_export(link)
    assert status == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == GPIPE_CSV and _mode(real) == 0o644


def test_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "link.csv"
    link.symlink_to(tmp_path / "made.csv")
    assert run_export(link) == 0
    assert link.is_symlink() and (tmp_path / "made.csv").read_text() == GPIPE_CSV


def test_a_dangling_symlink_into_a_missing_folder_names_that_folder(tmp_path: Path) -> None:
    link = tmp_path / "link.csv"
    link.symlink_to("nowhere/made.csv")
    with pytest.raises(PipesimError) as raised:
        output_path(link, "--out")
    assert str(raised.value) == f"--out: directory {str(tmp_path / 'nowhere')!r} does not exist"


def test_a_fifo_is_written_through_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    status = run_export(fifo)
    reader.join(timeout=30)
    assert status == 0
    assert stat.S_ISFIFO(fifo.lstat().st_mode)  # still a FIFO, not a regular file
    assert received == [GPIPE_CSV.encode()]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary left


def test_a_fifo_nobody_reads_is_refused_after_the_wait(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A plain open of a FIFO without a reader waits for ever; the writer waits
    PIPE_OPEN_WAIT_S for one, then refuses in one line; a reader coming late is served."""
    monkeypatch.setattr(pipesim.files.inputs, "PIPE_OPEN_WAIT_S", 0.3)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    status, _, err = run(capsys, *EXPORT, "--out", str(fifo))
    assert status == 2
    assert err == (
        f"pipesim: error: --out: cannot write {str(fifo)!r} (a named pipe that no program "
        "opened for reading in 0.3 s)\n"
    )
    received: list[bytes] = []
    monkeypatch.setattr(pipesim.files.inputs, "PIPE_OPEN_WAIT_S", 10.0)  # room for a slow box

    def read_late() -> None:
        time.sleep(0.1)
        received.append(fifo.read_bytes())

    reader = threading.Thread(target=read_late, daemon=True)
    reader.start()
    assert run_export(fifo) == 0
    reader.join(timeout=30)
    assert received == [GPIPE_CSV.encode()]


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a device node needs root")
def test_a_character_device_is_written_through(tmp_path: Path) -> None:
    """A node of our own (1, 3: what /dev/null is), never /dev/null itself: a writer that
    renames over it must not destroy a device the machine needs."""
    node = tmp_path / "null"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    before = node.stat()
    write_text_atomically(node, "discarded", field="--out")
    after = node.lstat()
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert after.st_ino == before.st_ino
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_a_socket_or_directory_is_refused(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        with pytest.raises(PipesimError, match=r"is a block device or socket, not a file"):
            output_path(path, "--out")
    finally:
        server.close()
    with pytest.raises(PipesimError, match=r"--out: '.*' is a directory"):
        output_path(tmp_path, "--out")


def run_export(path: Path) -> int:
    from cli.main import main

    return main([*EXPORT, "--out", str(path)])


def _full_disk(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_leaves_the_previous_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "results.json"
    target.write_text('{"good": true}')
    monkeypatch.setattr(os, "fsync", _full_disk)
    with pytest.raises(OutputError) as caught:
        write_text_atomically(target, '{"new": 1}', field="--out")
    assert str(caught.value) == (
        f"--out: cannot write {str(target)!r} (No space left on device); any previous file "
        "there is unchanged"
    )
    assert target.read_text() == '{"good": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_an_error_inside_the_writer_leaves_the_previous_file(tmp_path: Path) -> None:
    target = tmp_path / "f.bin"
    write_bytes_atomically(target, b"old", field="--out")

    def failing(handle: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        application.outputs.write_with(target, failing, field="--out")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_a_full_disk_in_the_cli_is_one_line_exit_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    target = tmp_path / "s.csv"
    monkeypatch.setattr(os, "fsync", _full_disk)
    status, out, err = run(capsys, *EXPORT, "--out", str(target))
    assert status == 1 and out == ""
    assert err == (
        f"pipesim: failed: --out: cannot write {str(target)!r} (No space left on device); any "
        "previous file there is unchanged\n"
    )
    assert not target.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_folder_without_write_permission_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        status, _, err = run(capsys, *EXPORT, "--out", str(folder / "s.csv"))
    finally:
        folder.chmod(0o700)
    assert status == 2
    assert err == f"pipesim: error: --out: cannot write into {str(folder)!r} (permission denied)\n"


def test_a_read_only_file_system_is_bad_input(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(os, "access", lambda *args: False)
    monkeypatch.setattr(application.outputs, "_read_only", lambda directory: True)
    with pytest.raises(PipesimError) as caught:
        output_path(tmp_path / "x.csv", "--out")
    assert (
        str(caught.value) == f"--out: cannot write into {str(tmp_path)!r} (read-only file system)"
    )


def test_an_output_directory_can_be_checked_without_creating_it(tmp_path: Path) -> None:
    from application.outputs import output_directory

    target = tmp_path / "a" / "b"
    assert output_directory(target, "--out", create=False) == target
    assert not (tmp_path / "a").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(PipesimError, match=r"^--out: '.*file' is not a directory$"):
        output_directory(tmp_path / "file" / "sub", "--out", create=False)
    assert output_directory(target, "--out") == target and target.is_dir()


def test_a_folder_that_takes_no_new_file_is_found_before_any_output_is_written(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Permission bits say yes to root and to /proc; a probe file says no. A command with
    several outputs refuses before it replaces the first, and the probe leaves nothing."""
    saved = tmp_path / "sim.json"
    saved.write_text("previous run")
    refusing = tmp_path / "refusing"
    refusing.mkdir()
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args: Any, **options: Any) -> tuple[int, str]:
        if Path(str(options.get("dir"))) == refusing:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        return real_mkstemp(*args, **options)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    status, out, err = run(
        capsys, "simulate", "--schedule", "1f1b", "-K", "2", "-M", "2", "--costs", "1,2",
        "--save", str(saved), "--timeline", str(refusing / "t.png"),
    )  # fmt: skip
    assert status == 2 and out == ""
    assert err == (
        f"pipesim: error: --timeline: cannot write into {str(refusing)!r} (No such file or "
        "directory)\n"
    )
    assert saved.read_text() == "previous run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["refusing", "sim.json"]
    assert list(refusing.iterdir()) == []


def test_a_new_output_directory_is_removed_when_the_command_fails_before_writing(
    tmp_path: Path,
) -> None:
    from application.outputs import new_output_directory

    target = tmp_path / "a" / "b" / "c"
    with (
        pytest.raises(PipesimError, match="late refusal"),
        new_output_directory(target, "--out") as folder,
    ):
        assert folder.is_dir()
        raise PipesimError("late refusal")
    assert list(tmp_path.iterdir()) == []
    # What was written stays, with the folders holding it; a folder that existed stays.
    (tmp_path / "kept").mkdir()
    with (
        pytest.raises(KeyboardInterrupt),
        new_output_directory(tmp_path / "kept" / "x" / "y", "--out") as folder,
    ):
        (folder.parent / "measured.json").write_text("{}")
        raise KeyboardInterrupt
    assert sorted(p.name for p in (tmp_path / "kept").rglob("*")) == ["measured.json", "x"]
    with new_output_directory(target, "--out") as folder:
        pass
    assert folder.is_dir()


def test_a_refused_reproduction_leaves_no_folder(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PIPESIM_MAX_ACTIONS", "10")
    status, _, err = run(capsys, "reproduce", "interleaved", "--out", str(tmp_path / "rep" / "x"))
    assert status == 2
    assert err.startswith("pipesim: error: ") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/dev/stdout").exists(), reason="no /dev/stdout")
def test_dev_stdout_on_a_pipe_is_written_through() -> None:
    """/dev/stdout on a pipe resolves to a name that does not exist ("pipe:[N]"); it is
    opened through the link, as a shell redirection would."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "cli", *EXPORT, "--out", "/dev/stdout"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == GPIPE_CSV


def test_a_full_disk_found_by_the_probe_is_the_machines_failure(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def full(*args: Any, **options: Any) -> tuple[int, str]:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(tempfile, "mkstemp", full)
    status, out, err = run(capsys, *EXPORT, "--out", str(tmp_path / "s.csv"))
    assert status == 1 and out == ""
    assert err == (
        f"pipesim: failed: --out: cannot write into {str(tmp_path)!r} (No space left on device)\n"
    )


def test_a_new_folder_refused_by_its_probe_is_removed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from application.outputs import new_output_directory

    def refuse(*args: Any, **options: Any) -> tuple[int, str]:
        raise OSError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with (
        pytest.raises(PipesimError, match="cannot write into"),
        new_output_directory(tmp_path / "a" / "b", "--out"),
    ):
        pass  # pragma: no cover - refused before
    assert list(tmp_path.iterdir()) == []
