"""``--run FILE``: a run file (:mod:`pipesim.config.run_file`) as the base of ``simulate``,
``sweep`` and ``plan``, every flag given beside it overriding the file.

The file's settings become the flags that say the same thing, placed before the user's own
(argparse keeps the last of a repeated option, so what the user typed wins), and the command
line is parsed again: a file's value is checked exactly as the flag's would be. A model stated
inline (a ``[model]`` table) is handed over as the model itself. ``plan`` takes the file's
model, hardware, training settings, recipe, world size (T x K x D) and batch; the layout it
searches itself, and says so in one line. A setting the command has no flag for is warned
about on stderr, never dropped silently.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pipesim.common.checks import SpecError
from pipesim.errors import PipesimError

if TYPE_CHECKING:  # the run file's reader and the models load when a run file is read
    from pipesim.config.run_file import RunFile

# The model's place-holder on the command line while a run file's inline model is parsed.
INLINE_MODEL = "<the run file's [model]>"

# attribute -> the flag of simulate and sweep that states it (sweep's lists take one value);
# booleans are written as the flag or its --no- form.
_SIMULATE_FLAGS: dict[str, str] = {
    "batch": "--batch",
    "microbatch_size": "--microbatch-size",
    "optimizer": "--optimizer",
    "master_weights": "--master-weights",
    "dtype": "--dtype",
    "seq_length": "--seq-length",
    "tensor_parallel": "--tensor-parallel",
    "sequence_parallel": "--sequence-parallel",
    "pipeline_parallel": "-K",
    "data_parallel": "--data-parallel",
    "zero": "--zero",
    "reshard_after_forward": "--reshard-after-forward",
    "context_parallel": "--context-parallel",
    "cp_comm_type": "--context-exchange",
    "expert_parallel": "--expert-parallel",
    "expert_tensor_parallel": "--expert-tensor-parallel",
    "offload_optimizer": "--offload-optimizer",
    "offload_activations": "--offload-activations",
    "recompute": "--recompute",
    "tensor_across_nodes": "--tensor-across-nodes",
    "schedule": "--schedule",
    "chunks": "-v",
    "microbatches": "-M",
    "partition": "--partition",
    "remat": "--remat",
    "memory_limit": "--memory-limit",
    "steps": "--steps",
    "recipe": "--recipe",
    "overlap_grad_reduce": "--overlap-grad-reduce",
    "attention": "--attention",
    "blocking_p2p": "--blocking-p2p",
    "scatter_gather_p2p": "--scatter-gather-p2p",
    "tp_comm_overlap": "--tp-comm-overlap",
    "memory_reserve": "--memory-reserve",
    "fragmentation": "--fragmentation",
}
_SWEEP_FLAGS = {
    **_SIMULATE_FLAGS,
    "schedule": "--schedules",
    "memory_limit": "--memory-limits",
}
_PLAN_FLAGS = {
    attribute: _SIMULATE_FLAGS[attribute]
    for attribute in (
        "batch",
        "optimizer",
        "master_weights",
        "dtype",
        "seq_length",
        "recipe",
        "overlap_grad_reduce",
        "attention",
    )
}
# What plan searches (the file's values are not fixed by it).
_PLAN_SEARCHES = (
    "microbatch_size",
    "tensor_parallel",
    "sequence_parallel",
    "pipeline_parallel",
    "data_parallel",
    "zero",
    "reshard_after_forward",
    "context_parallel",
    "cp_comm_type",
    "expert_parallel",
    "recompute",
    "schedule",
    "chunks",
    "microbatches",
    "partition",
    "remat",
    "memory_limit",
    "steps",
)
FLAGS_OF = {"simulate": _SIMULATE_FLAGS, "sweep": _SWEEP_FLAGS, "plan": _PLAN_FLAGS}


def _key_of(attribute: str) -> str:
    """The run file's ``section.key`` that sets ``attribute``."""
    from pipesim.config.run_file import KEYS

    return next(f"{key.section}.{key.key}" for key in KEYS if key.attribute == attribute)


def add_run_argument(parser: argparse.ArgumentParser | Any) -> None:
    """``--run FILE`` (or a framework's file) on ``simulate``, ``sweep`` and ``plan``."""
    parser.add_argument(
        "--run",
        metavar="FILE",
        help="a run file (TOML: model, hardware, [training], [parallelism], [pipeline], "
        "[recipe]; see the run-files guide) as the base of this command; flags given beside "
        "it override the file",
    )
    parser.add_argument(
        "--megatron-args",
        metavar="FILE",
        help="instead of --run: a Megatron-LM launch script or argument file, translated "
        "(needs --hardware; --world-size gives data parallelism)",
    )
    parser.add_argument(
        "--torchtitan",
        metavar="FILE",
        help="instead of --run: a torchtitan job TOML, translated (needs --hardware)",
    )
    parser.add_argument(
        "--world-size",
        type=int,
        metavar="N",
        help="with --megatron-args or --torchtitan: the devices in all (the launcher's, which "
        "the framework's file does not say)",
    )
    parser.add_argument(
        "--allow-ignored",
        action="store_true",
        help="with --megatron-args or --torchtitan: list the options that do not change a "
        "step's cost (paths, logging, learning rate...) as ignored instead of refusing them",
    )


def run_flag_pairs(
    run: RunFile, command: str
) -> tuple[list[tuple[str, str | None]], list[str], list[str]]:
    """The (flag, value) pairs that state ``run`` for ``command`` (value None: a flag that
    takes none); the file's keys the command searches itself (plan); and those it has no flag
    for."""
    from pipesim.workload.model import Model

    flags = FLAGS_OF[command]
    model = INLINE_MODEL if isinstance(run.model, Model) else run.located(run.model)
    pairs: list[tuple[str, str | None]] = [
        ("--model", model),
        ("--hardware", run.located(run.hardware)),
    ]
    searched: list[str] = []
    unread: list[str] = []
    for attribute, value in run.stated().items():
        flag = flags.get(attribute)
        if flag is None:
            (searched if command == "plan" and attribute in _PLAN_SEARCHES else unread).append(
                _key_of(attribute)
            )
            continue
        if isinstance(value, bool):
            pairs.append((flag if value else "--no-" + flag.removeprefix("--"), None))
        else:
            pairs.append((flag, str(value)))
    if command == "plan":
        pairs.append(("--devices", str(run.world_size)))
        if run.batch is None and None not in (run.microbatch_size, run.microbatches):
            batch = (run.microbatch_size or 1) * (run.microbatches or 1) * (run.data_parallel or 1)
            pairs.append(("--batch", str(batch)))
    return pairs, searched, unread


def run_flags(run: RunFile, command: str) -> tuple[list[str], list[str], list[str]]:
    """:func:`run_flag_pairs` as the words of a command line."""
    pairs, searched, unread = run_flag_pairs(run, command)
    return words_of(pairs), searched, unread


def words_of(pairs: Sequence[tuple[str, str | None]]) -> list[str]:
    """(flag, value) pairs as command-line words."""
    return [word for flag, value in pairs for word in (flag, value) if word is not None]


def argv_with_run_file(argv: Sequence[str]) -> tuple[list[str], RunFile | None]:
    """``argv`` with the flags of the run its ``--run`` (or ``--megatron-args``,
    ``--torchtitan``) file states, for ``simulate``, ``sweep`` and ``plan``, placed after the
    command's name, before the user's own (so they win); the run file read, or None. Read
    before parsing: a file may hold what a command requires."""
    words = list(argv)
    if not words or words[0] not in FLAGS_OF:
        return words, None
    found = read_run_source(words[1:])
    if found is None:
        return words, None
    run, source, notes = found
    flags, searched, unread = run_flags(run, words[0])
    for note in summarized(notes):
        sys.stderr.write(f"pipesim: note: {source}: {note}\n")
    if searched:
        sys.stderr.write(
            f"pipesim: note: {source}: plan searches the layout itself; the file's "
            f"{', '.join(searched)} are not fixed by it\n"
        )
    if unread:
        sys.stderr.write(
            f"pipesim: warning: {source}: {words[0]} has no option for "
            f"{', '.join(unread)}; not read\n"
        )
    return [words[0], *flags, *words[1:]], run


_SOURCES = ("--run", "--megatron-args", "--torchtitan")
_IGNORED = ": ignored ("  # how a translator's note says an option was ignored, and why


def summarized(notes: Sequence[str]) -> list[str]:
    """A translation's notes for a command's stderr: each approximation on its own line, the
    options ignored as cost-neutral named together on one (``pipesim run show`` lists each
    with its reason)."""
    ignored = [note.split(_IGNORED)[0].split()[0] for note in notes if _IGNORED in note]
    kept = [note for note in notes if _IGNORED not in note]
    if ignored:
        kept.append(
            f"{len(ignored)} option(s) ignored as cost-neutral: {', '.join(ignored)} "
            "(pipesim run show says why, each)"
        )
    return kept


def read_run_source(words: Sequence[str]) -> tuple[RunFile, str, tuple[str, ...]] | None:
    """The run the file among ``words`` states (``--run``, ``--megatron-args`` or
    ``--torchtitan``, with ``--hardware``, ``--world-size`` and ``--allow-ignored`` for the
    translations), what to call its file, and the translation's notes; None without one."""
    before = words[: words.index("--")] if "--" in words else list(words)
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for option in (*_SOURCES, "--hardware"):
        pre.add_argument(option)
    pre.add_argument("--world-size", type=int)
    pre.add_argument("--allow-ignored", action="store_true")
    try:
        known, _ = pre.parse_known_args(before)
    except SystemExit:  # a malformed value: the full parse says so in its own words
        return None
    given = [option for option in _SOURCES if getattr(known, _dest(option)) is not None]
    for option in _SOURCES:  # argparse keeps the last of two: a second file would win unsaid
        times = sum(1 for word in before if word == option or word.startswith(option + "="))
        if times > 1:
            raise PipesimError(f"{option} given {times} times: give one file describing the run")
    if not given:
        translation_only = [
            flag
            for flag, value in (("--world-size", known.world_size), ("--allow-ignored", None))
            if (value is not None if flag == "--world-size" else known.allow_ignored)
        ]
        if translation_only:
            serve = "serves" if len(translation_only) == 1 else "serve"
            raise PipesimError(
                f"{' and '.join(translation_only)} only {serve} --megatron-args or --torchtitan "
                "(a framework's file that does not say them); give one of those, or leave them "
                "out"
            )
        return None
    if len(given) > 1:
        raise PipesimError(f"{' and '.join(given)}: give one file describing the run, not both")
    if given[0] == "--run" and (known.world_size is not None or known.allow_ignored):
        raise PipesimError(
            "--world-size and --allow-ignored serve --megatron-args or --torchtitan; a run "
            "file states its world (T x K x D) and has no foreign options to ignore"
        )
    option, path = given[0], getattr(known, _dest(given[0]))
    if option == "--run":
        from pipesim.config.run_file import load_run_file

        return load_run_file(path), f"run file {path}", ()
    if known.hardware is None:
        raise PipesimError(
            f"{option} needs --hardware: the framework's file does not say what it runs on"
        )
    if known.world_size is not None and known.world_size < 1:
        raise PipesimError(f"--world-size must be an integer >= 1, got {known.world_size}")
    if option == "--torchtitan":
        from pipesim.config.translate.torchtitan import run_from_torchtitan

        run, notes = run_from_torchtitan(
            path,
            hardware=known.hardware,
            world_size=known.world_size,
            allow_ignored=known.allow_ignored,
        )
        return run, f"torchtitan file {path}", notes
    from pipesim.config.translate.megatron import megatron_words_from_text, run_from_megatron_args
    from pipesim.files.inputs import decode_text, read_input

    where = f"Megatron-LM arguments {str(path)!r}"
    text = decode_text(read_input(path, "Megatron-LM arguments", SpecError), where, SpecError)
    run, notes = run_from_megatron_args(
        megatron_words_from_text(text, where),
        hardware=known.hardware,
        where=where,
        allow_ignored=known.allow_ignored,
        world_size=known.world_size,
    )
    return run, f"Megatron-LM arguments {path}", notes


def _dest(option: str) -> str:
    return option.removeprefix("--").replace("-", "_")


def with_inline_model(args: argparse.Namespace, run: RunFile | None) -> argparse.Namespace:
    """``args`` with the run file's inline model in place of its place-holder."""
    if run is None or args.model != INLINE_MODEL:
        return args
    from pipesim.workload.model import Model

    if isinstance(run.model, Model):
        args.model = run.model
    return args
