"""Entry point of the ``pipesim`` console script."""

from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager
from types import FrameType

from application.command_line import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_INTERRUPTED,
    ArgumentParser,
    watching_stdout,
)
from application.lifetime import (
    STOP_SIGNALS,
    interrupt_reason,
    signals_handled,
    terminate_as_interrupt,
)
from cli.commands import COMMANDS, command_named
from cli.flags import FLAGS
from pipesim import __version__
from pipesim.common.limits import check_environment
from pipesim.errors import Interrupted, PipesimError, RunFailed, fields_spelled, short_values


def build_parser(command: str | None = None, *, lazily: bool = False) -> ArgumentParser:
    """The ``pipesim`` argument parser: every command in full (the documentation's reference
    and the tests read that one), or, ``lazily``, only ``command``'s (a sub-command's name, or
    None for none): only its module is imported and its options registered; the others are
    listed by their summaries (:mod:`cli.commands`), enough for ``pipesim --help``, ``pipesim
    --version`` and argparse's refusal of an unknown name."""
    parser = ArgumentParser(
        prog="pipesim",
        description=(
            "Simulate pipeline-parallel training schedules on configurable accelerators, and "
            "check the predictions against real PyTorch runs."
        ),
        epilog="Exit status: 0 done; 1 a check or a write failed; 2 bad input (or beyond a "
        "size limit); 130 interrupted (Ctrl-C, SIGTERM or SIGHUP), after saving what finished.",
    )
    parser.add_argument("--version", action="version", version=f"pipesim {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands._parser_class = ArgumentParser  # sub-parsers report errors in one line too
    chosen = command_named(command) if command is not None else None
    registered: set[str] = set()
    for each in COMMANDS:
        if each.module in registered:
            continue  # a module registering several commands (the catalogues) did so once
        if not lazily or (chosen is not None and each.module == chosen.module):
            importlib.import_module(each.module).register(commands)
            registered.add(each.module)
        else:
            commands.add_parser(each.name, help=each.summary, add_help=False)
    return parser


def _command_word(argv: Sequence[str]) -> str | None:
    """The sub-command an argument list runs: its first word, unless that is an option
    (``--help``, ``--version``: no command's module is needed)."""
    return argv[0] if argv and not argv[0].startswith("-") else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status: 0 done, 1 a check or a write failed,
    2 bad input, 130 interrupted. Every failure is one line on stderr (a schedule error adds
    its marked grid on the lines after the first), never a traceback; standard output that
    cannot be written is one of them (:func:`application.command_line.watching_stdout`)."""
    status = watching_stdout(lambda: _run(argv), "pipesim")
    if status == EXIT_INTERRUPTED and argv is None:
        _stops_change_nothing_now()
    return status


def _stops_change_nothing_now() -> None:
    """Once the process has decided to end interrupted, its last line written and its work
    saved, a later stop signal changes nothing: ignored from here, through the interpreter's
    shutdown (which puts SIGINT back to the system's default, under which a Ctrl-C then kills
    the process, exit -2, and closes the Dask cluster's threads and processes meanwhile). Only
    for the process's own command line (``argv`` None): a caller that runs :func:`main` in its
    own process keeps its handlers."""
    for signum in (signal.SIGINT, *STOP_SIGNALS):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, signal.SIG_IGN)


def _run(argv: Sequence[str] | None) -> int:
    """The command itself, its errors reported as one line each; a failure to write standard
    output is left to :func:`main`."""
    given = list(sys.argv[1:] if argv is None else argv)
    try:
        with _stop_signals_end_the_process():
            parser = build_parser(_command_word(given), lazily=True)
            from cli.run_file import argv_with_run_file, with_inline_model

        with fields_spelled(FLAGS):  # a run file's translation speaks flags too
            words, run_file = argv_with_run_file(given)
        args = with_inline_model(parser.parse_args(words), run_file)
        check_environment()
        with terminate_as_interrupt(), fields_spelled(FLAGS):
            status: int = args.handler(args)
    except PipesimError as error:
        sys.stderr.write(f"pipesim: error: {short_values(str(error))}\n")
        return EXIT_BAD_INPUT
    except RunFailed as error:
        sys.stderr.write(f"pipesim: failed: {short_values(str(error))}\n")
        return EXIT_CHECK_FAILED
    except Interrupted as error:
        sys.stderr.write(f"pipesim: interrupted: {error}\n")
        return EXIT_INTERRUPTED
    except KeyboardInterrupt as interrupt:
        sys.stderr.write(f"pipesim: interrupted ({interrupt_reason(interrupt)})\n")
        return EXIT_INTERRUPTED
    except MemoryError:  # a limit raised beyond this machine's memory
        sys.stderr.write(
            "pipesim: failed: out of memory (a PIPESIM_MAX_* limit raised beyond what this "
            "machine holds? lower it or the request)\n"
        )
        return EXIT_CHECK_FAILED
    return status


def _stop_signals_end_the_process() -> AbstractContextManager[None]:
    """While the sub-commands' modules load, a stop signal ends the process at once with the
    usual last line and status 130: an interrupt inside an extension module's import (numpy's)
    would otherwise surface as an ImportError with a traceback. Nothing has been computed or
    written yet, so nothing is lost. Ignored signals stay ignored (:func:`signals_handled`)."""
    return signals_handled(_end_the_process, (signal.SIGINT, *STOP_SIGNALS))


def _end_the_process(signum: int, frame: FrameType | None) -> None:
    reason = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    os.write(2, f"pipesim: interrupted ({reason})\n".encode())
    os._exit(EXIT_INTERRUPTED)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
