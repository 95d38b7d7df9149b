"""Stop signals taken as Ctrl-C, and workers that end with their parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from application.lifetime import (
    StopSignal,
    interrupt_reason,
    terminate_as_interrupt,
)
from tests.processes import running, seconds_until_gone


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_is_an_interrupt_inside_the_block_only(stop: signal.Signals) -> None:
    before = signal.getsignal(stop)
    with pytest.raises(StopSignal) as caught, terminate_as_interrupt():
        os.kill(os.getpid(), stop)
        time.sleep(5)  # the handler raises at once; reaching the end would fail the test
    assert isinstance(caught.value, KeyboardInterrupt)
    assert interrupt_reason(caught.value) == stop.name
    assert interrupt_reason(KeyboardInterrupt()) == "Ctrl-C"
    assert signal.getsignal(stop) is before


def test_an_ignored_stop_signal_stays_ignored() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with terminate_as_interrupt():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN  # as under nohup
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_a_worker_ends_within_a_second_of_its_parent_s_kill_9(tmp_path: Path) -> None:
    # parent -> worker; the worker watches its parent and would otherwise sleep a minute.
    worker = textwrap.dedent(
        """
        import sys, time
        from pathlib import Path
        from application.lifetime import end_with_parent
        end_with_parent("worker: parent gone", 3, then=Path(sys.argv[1]).unlink)
        print("watching", flush=True)
        time.sleep(60)
        """
    )
    parent = textwrap.dedent(
        f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", {worker!r}, {str(tmp_path / "temp")!r}], stderr=open({str(tmp_path / "err")!r}, "w"), stdout=subprocess.PIPE, text=True)
        child.stdout.readline()
        print(child.pid, flush=True)
        time.sleep(60)
        """
    )
    (tmp_path / "temp").write_text("the dead parent's temporary file")
    middle = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    try:
        assert middle.stdout is not None
        worker_pid = int(middle.stdout.readline())
        middle.kill()
        middle.wait(10)
        elapsed = seconds_until_gone([worker_pid], time.monotonic(), 10)
        assert not running(worker_pid)
        assert elapsed < 3
    finally:
        middle.kill()
    assert (tmp_path / "err").read_text() == "worker: parent gone\n"
    assert not (tmp_path / "temp").exists()  # removed by the worker's last act
