"""``python -m executor.torchrun``: torchrun, ending the way every pipesim command ends.

It takes torchrun's own arguments (``python -m executor.torchrun --nproc-per-node 2 -m executor
--schedule 1f1b -M 8``) and runs torchrun's agent in this process. torchrun itself ends a
Ctrl-C or a ``kill`` with a 35-line traceback of its ``SignalException`` and exit 1, and a
failed rank with a box of its own around the error; here each is one line after the ranks'
own (each rank prints one), with the exit status the executor uses: 130 interrupted, the
failed rank's status (1 a run failure, 2 bad input) otherwise.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence

from application.command_line import EXIT_CHECK_FAILED, EXIT_INTERRUPTED
from executor.errors import first_line

PROG = "python -m executor.torchrun"


def main(argv: Sequence[str] | None = None) -> int:
    """Run torchrun's agent with ``argv``; 0 when every rank succeeded."""
    try:
        from torch.distributed.elastic.multiprocessing.api import SignalException
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.run import parse_args, run
    except ModuleNotFoundError:
        sys.stderr.write(f"{PROG}: error: PyTorch is not installed; the executor needs it\n")
        return 2
    args = parse_args(list(sys.argv[1:] if argv is None else argv))  # type: ignore[no-untyped-call]
    # The agent's own notices (OMP_NUM_THREADS set, "Received 2 death signal", "Sending process
    # ... closing signal", "failed (exitcode: 2) local_rank: 0 ...") say what the lines below
    # say, in one line each.
    for name in ("torch.distributed.run", "torch.distributed.elastic"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        run(args)  # type: ignore[no-untyped-call]
    except SignalException as stop:
        name = "Ctrl-C" if stop.sigval == signal.SIGINT else signal.Signals(stop.sigval).name
        sys.stderr.write(f"{PROG}: interrupted: stopped by {name}; the ranks were stopped\n")
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted: stopped by Ctrl-C\n")
        return EXIT_INTERRUPTED
    except ChildFailedError as failed:
        rank, failure = failed.get_first_failure()
        status = failure.exitcode
        if status < 0:  # killed by a signal: torchrun reports its negative number
            cause = f"was killed by {signal.Signals(-status).name}"
            status = EXIT_CHECK_FAILED
        else:
            cause = f"exited with status {status}"
        sys.stderr.write(
            f"{PROG}: failed: rank {rank} {cause} (its own line above says why; "
            f"{len(failed.failures)} of the ranks failed)\n"
        )
        return status if status in (1, 2, EXIT_INTERRUPTED) else EXIT_CHECK_FAILED
    except RuntimeError as error:  # the agent's own rendezvous (a port in use, a lost store)
        sys.stderr.write(f"{PROG}: failed: {first_line(error)}\n")
        return EXIT_CHECK_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
