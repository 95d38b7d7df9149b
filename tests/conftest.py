"""Test configuration: hypothesis profiles, a scratch working directory per test, and Ctrl-C
as a terminal delivers it whatever started the suite.

``HYPOTHESIS_PROFILE=ci`` (what ``.ci/run`` uses) keeps the suite within minutes on a 2-core
machine; ``dev`` (the default) explores more; ``thorough`` is for a long local run.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# A suite started in the background of a non-interactive shell (``pytest ... &`` in a script)
# inherits Ctrl-C ignored, and so would every process the tests start: the tests that stop a
# command with Ctrl-C would then see it run to its end. A command ignores an inherited ignore on
# purpose (as ``nohup`` asks); the tests mean a terminal's Ctrl-C, so the suite takes SIGINT back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _scratch_working_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Run every test in a fresh empty folder, so a command whose output path falls back to
    the working directory writes there, never into the checkout."""
    previous = Path.cwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(previous)
