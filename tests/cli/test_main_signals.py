"""A stop signal while the sub-commands load ends ``pipesim`` with one line and status 130
(an interrupt inside numpy's import would otherwise be an ImportError and a traceback)."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import os, signal, time
from cli.main import _stop_signals_end_the_process
with _stop_signals_end_the_process():
    os.kill(os.getpid(), signal.{name})
    time.sleep(30)
print("not reached")
"""


@pytest.mark.parametrize(
    ("name", "reason"), [("SIGINT", "Ctrl-C"), ("SIGTERM", "SIGTERM"), ("SIGHUP", "SIGHUP")]
)
def test_a_stop_signal_while_loading_exits_130_in_one_line(name: str, reason: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(name=name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 130
    assert done.stdout == ""
    assert done.stderr == f"pipesim: interrupted ({reason})\n"


def test_the_console_script_imports_no_sub_command_before_main_runs() -> None:
    """``import cli.main`` (what the console script does first) loads no numpy: the heavy
    imports happen inside main, where a stop signal is handled."""
    code = "import sys, cli.main; print('numpy' in sys.modules, 'cli.schedule_cmd' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout == "False False\n"
