"""``python -m executor``: run a schedule for real, locally or under torchrun.

Under ``torchrun --nproc-per-node K -m executor ...`` each rank runs its device over
torch.distributed (gloo on CPU, NCCL with ``--device cuda``; torchrun also reaches many hosts).
Without torchrun it runs all K devices in this process (``-K``). ``--check`` compares the first
step's gradients with the unpipelined model's (exit 1 if they differ).

Exit status: 0 done; 1 the gradient check failed or the run failed (a stage raised, NaN or Inf
appeared, a peer died or stalled, the torchrun agent died); 2 bad input (including a run over
``--max-memory-gib``, or no torch installed); 130 interrupted (Ctrl-C, SIGTERM or SIGHUP).
Every failure is one line on stderr. Under torchrun a rank that fails leaves without the
process group's teardown, which would wait for the peers it just lost, and a rank whose agent
died (``kill -9``) exits within a second instead of training on alone.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Sequence

from application.command_line import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_INTERRUPTED
from application.lifetime import (
    end_with_parent,
    interrupt_reason,
)
from application.outputs import write_text_atomically
from executor.interrupts import interrupts_that_stick
from executor.options import PROG, check_options, parser, rank_place, under_torchrun
from pipesim.errors import PipesimError, RunFailed, short_values

NO_TORCH = (
    "PyTorch is not installed; the executor needs it: install the executor extra "
    "(pip install 'pipesim[executor]')"
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run; 0 done, 1 the check or the run failed, 2 bad input, 130 interrupted."""
    distributed = under_torchrun()
    status = _main(argv)
    if distributed and status != 0:
        _leave(status)  # a failed rank must not wait in the teardown for the peers it lost
    return status


def _main(argv: Sequence[str] | None) -> int:
    try:
        try:
            args = parser().parse_args(argv)
        except SystemExit as leaving:  # argparse: --help (0) or a bad option (2, one line)
            return leaving.code if isinstance(leaving.code, int) else EXIT_BAD_INPUT
        check_options(args)
        place = rank_place()
        if place is not None:
            end_with_parent(
                f"{PROG}: failed: rank {place.rank}: the torchrun agent that started it is "
                "gone; stopping",
                EXIT_CHECK_FAILED,
            )
        # torch's C++ warnings (a lost store, a retried connection) come with a 30-line stack
        # each, and the failure they lead to is reported in one line anyway; errors still show.
        # Read once, when torch loads: a user's own setting wins.
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        try:
            from executor.launcher import run
        except ModuleNotFoundError as error:
            if error.name != "torch" and not (error.name or "").startswith("torch."):
                raise
            return _fail("error", NO_TORCH, EXIT_BAD_INPUT)
        with interrupts_that_stick():
            status = run(args, place)
    except PipesimError as error:
        return _fail("error", str(error), EXIT_BAD_INPUT)
    except RunFailed as error:  # the executor's errors: a stage, NaN, a peer
        return _fail("failed", str(error), EXIT_CHECK_FAILED)
    except KeyboardInterrupt as interrupt:
        signal.setitimer(signal.ITIMER_REAL, 0)  # a repeat may have ended the block early
        return _fail("interrupted", f"stopped by {interrupt_reason(interrupt)}", EXIT_INTERRUPTED)
    if under_torchrun() and status == 0:
        from executor.teardown import end_rank

        end_rank(status, args.timeout)
    return status


def _fail(kind: str, message: str, status: int) -> int:
    first = short_values(message.splitlines()[0]) if message else kind
    sys.stderr.write(f"{PROG}: {kind}: {first}\n")
    _tell_torchrun(f"{kind}: {first}")
    return status


def _tell_torchrun(line: str) -> None:
    """Under torchrun, leave ``line`` in the rank's error file, so torchrun's summary (its
    "root cause") shows the failure instead of "error_file: <N/A>": a stalled rank is then
    named there too. Best effort: the run's own line is already on stderr."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    record = {
        "message": {
            "message": line,
            "extraInfo": {"py_callstack": line, "timestamp": str(int(time.time()))},
        }
    }
    try:
        write_text_atomically(path, json.dumps(record), field="TORCHELASTIC_ERROR_FILE")
    except (PipesimError, RunFailed, OSError):
        return


def _leave(status: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main())
