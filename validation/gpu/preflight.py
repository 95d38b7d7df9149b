"""``python -m validation.gpu.preflight``: can this machine run the prepared GPU check?

A GPU machine's image may lack pure-Python dependencies (simpy, say): each one the check needs
is looked up before anything runs, and what is missing is said in one line (exit 2), with how
to bring it (wheels carried in ``.whl``, see ``validation/gpu/fetch_wheels.sh``). No CUDA device
is exit 2 as well. Missing green contexts are reported and the check goes on: the CUDA tests and
the layer timing need none, and the partitioned suite refuses in one line by itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

# The imports the check makes: pipesim's own dependencies, its executor's, its tests'.
NEEDED = ("simpy", "numpy", "matplotlib", "tqdm", "torch", "pytest", "hypothesis", "pytest_timeout")
DISTRIBUTIONS = {"pytest_timeout": "pytest-timeout"}


def missing_modules(names: tuple[str, ...] = NEEDED) -> list[str]:
    """The distributions of ``names`` that cannot be found here."""
    return [DISTRIBUTIONS.get(n, n) for n in names if importlib.util.find_spec(n) is None]


def broken_modules(names: tuple[str, ...] = NEEDED) -> list[str]:
    """``name: first line of the error`` for each of ``names`` found but failing to import
    (a torch whose CUDA libraries are missing, say)."""
    broken = []
    for name in names:
        if importlib.util.find_spec(name) is None:
            continue
        try:
            importlib.import_module(name)
        except Exception as error:
            lines = str(error).strip().splitlines()
            broken.append(f"{name}: {lines[0] if lines else type(error).__name__}")
    return broken


def main(argv: list[str] | None = None) -> int:
    """One line per finding on stderr; 0 when the check can run."""
    args = sys.argv[1:] if argv is None else argv
    if args:
        sys.stderr.write("usage: python -m validation.gpu.preflight (no arguments)\n")
        return 2
    missing = missing_modules()
    if missing:
        sys.stderr.write(
            f"run.sh: missing Python packages: {', '.join(missing)} (run bash "
            "validation/gpu/fetch_wheels.sh on the development machine and carry .whl)\n"
        )
        return 2
    broken = broken_modules()
    if broken:
        sys.stderr.write(f"run.sh: packages that fail to import: {'; '.join(broken)}\n")
        return 2
    import torch

    if not torch.cuda.is_available():
        sys.stderr.write(f"run.sh: no CUDA device (torch {torch.__version__})\n")
        return 2
    from executor.lanes import green_context_support

    reason = green_context_support()
    name = torch.cuda.get_device_name(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sys.stdout.write(f"run.sh: {name}, {sms} SMs, torch {torch.__version__}\n")
    if reason is not None:
        sys.stdout.write(
            f"run.sh: no green contexts ({reason}): the partitioned suite will refuse\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
