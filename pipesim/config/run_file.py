"""A run file: one training run's whole configuration as TOML, read and written.

A run file states what ``pipesim simulate`` needs to simulate one run: the model and hardware
(catalogue names, files beside the run file, or the model inline as a ``[model]`` table in the
model file's own format), the training settings, every parallel dimension, the pipeline's
shape and schedule, and the software's recipe::

    model = "gpt3-175b"                 # a catalogue name, a model TOML, or a [model] table
    hardware = "a100"                   # a catalogue name or a hardware TOML

    [training]
    batch = 1536                        # samples per optimizer step
    microbatch_size = 1
    dtype = "fp16"                      # optional: optimizer, master_weights, seq_length too

    [parallelism]
    tensor_parallel = 8
    sequence_parallel = false
    pipeline_parallel = 16              # K, the pipeline's devices
    data_parallel = 8
    zero = 0                            # ZeRO stage 0-3 (3: FSDP, weights sharded too)
    reshard_after_forward = "default"   # ZeRO-3: default (not in a pipeline), always, never
    context_parallel = 1                # CP: each sample's sequence split CP ways
    cp_comm_type = "p2p"                # or "all-gather" (Llama 3's)
    expert_parallel = 1                 # EP: MoE layers' experts over EP of the D x CP ranks
    expert_tensor_parallel = 1          # optional ETP: each expert split ETP ways (default T)
    offload_optimizer = false           # optimizer state, master weights and step on the host
    offload_activations = 0             # the first N blocks' stash in host memory
    recompute = "none"                  # selective, full, or a number of layers per stage

    [pipeline]
    schedule = "interleaved-1f1b"
    chunks = 3                          # v, stages per device
    microbatches = 192                  # M per replica and step
    partition = [8, 8, 8]               # optional: layers per stage, or "balanced"

    [recipe]
    name = "megatron-lm-2021"           # optional, with changes to its choices:
    overlap_grad_reduce = false         # also attention, blocking_p2p, scatter_gather_p2p,
                                        # tp_comm_overlap

Every key is optional but ``model`` and ``hardware``; a key left out is the command's default.
Keys are the library's field names (the command line spells them as its flags). A key no
section knows, a value of the wrong kind, a file that is not TOML: one line naming the file
and the key. Relative paths are read relative to the run file's folder.

:class:`RunFile` holds what the file says, unresolved (names stay names), so that a run file
read and written again says the same; the command line turns it into a
:class:`~pipesim.config.run_config.RunConfig` and a pipeline shape with the same checks as its
flags (:mod:`cli.run_file`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.errors import few, shown
from pipesim.files.toml_reader import Fields, boolean, parse_toml, read_toml, string
from pipesim.files.toml_writer import toml_text
from pipesim.workload.model import Model
from pipesim.workload.toml_spec import model_from_table, model_table


def _count(field: str, value: Any) -> int:
    """An integer >= 0 (ZeRO's stage may be 0)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(f"{field} must be an integer >= 0, got {shown(value)}")
    return value


def _recompute(field: str, value: Any) -> str:
    """``none``, ``selective``, ``full`` or a number of layers (written as a number)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise SpecError(f"{field} must be none, selective, full or layers >= 1, got {value}")
        return str(value)
    return string(field, value)


def _partition(field: str, value: Any) -> str:
    """An objective's name, or layers per stage as an array of integers >= 1."""
    if isinstance(value, list):
        if not value:
            raise SpecError(f"{field} must name an objective or list layers per stage, got []")
        return ",".join(str(checks.positive_int(f"{field}[{i}]", v)) for i, v in enumerate(value))
    return string(field, value)


def _bytes_or_name(field: str, value: Any) -> str:
    """An optimizer's name or its bytes per parameter (a number)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        checks.non_negative(field, float(value))
        return str(value)  # 12 reads "12", 12.5 "12.5": as a flag would give them
    return string(field, value)


@dataclass(frozen=True)
class _Key:
    """One key of a run file: its section ("" for the top), its name in the file, the
    :class:`RunFile` attribute it fills, and the check that reads its value."""

    section: str
    key: str
    attribute: str
    read: Callable[[str, Any], Any]


# Every key a run file may hold, in the order a written file lists them.
KEYS: tuple[_Key, ...] = (
    _Key("training", "batch", "batch", checks.positive_int),
    _Key("training", "microbatch_size", "microbatch_size", checks.positive_int),
    _Key("training", "optimizer", "optimizer", _bytes_or_name),
    _Key("training", "master_weights", "master_weights", boolean),
    _Key("training", "dtype", "dtype", string),
    _Key("training", "seq_length", "seq_length", checks.positive_int),
    _Key("parallelism", "tensor_parallel", "tensor_parallel", checks.positive_int),
    _Key("parallelism", "sequence_parallel", "sequence_parallel", boolean),
    _Key("parallelism", "pipeline_parallel", "pipeline_parallel", checks.positive_int),
    _Key("parallelism", "data_parallel", "data_parallel", checks.positive_int),
    _Key("parallelism", "zero", "zero", _count),
    _Key("parallelism", "reshard_after_forward", "reshard_after_forward", string),
    _Key("parallelism", "context_parallel", "context_parallel", checks.positive_int),
    _Key("parallelism", "cp_comm_type", "cp_comm_type", string),
    _Key("parallelism", "expert_parallel", "expert_parallel", checks.positive_int),
    _Key("parallelism", "expert_tensor_parallel", "expert_tensor_parallel", checks.positive_int),
    _Key("parallelism", "offload_optimizer", "offload_optimizer", boolean),
    _Key("parallelism", "offload_activations", "offload_activations", _count),
    _Key("parallelism", "recompute", "recompute", _recompute),
    _Key("parallelism", "tensor_across_nodes", "tensor_across_nodes", boolean),
    _Key("pipeline", "schedule", "schedule", string),
    _Key("pipeline", "memory_limit", "memory_limit", checks.positive_int),  # synth's
    _Key("pipeline", "chunks", "chunks", checks.positive_int),
    _Key("pipeline", "microbatches", "microbatches", checks.positive_int),
    _Key("pipeline", "partition", "partition", _partition),
    _Key("pipeline", "remat", "remat", boolean),
    _Key("pipeline", "steps", "steps", checks.positive_int),
    _Key("recipe", "name", "recipe", string),
    _Key("recipe", "overlap_grad_reduce", "overlap_grad_reduce", boolean),
    _Key("recipe", "attention", "attention", string),
    _Key("recipe", "blocking_p2p", "blocking_p2p", boolean),
    _Key("recipe", "scatter_gather_p2p", "scatter_gather_p2p", boolean),
    _Key("recipe", "tp_comm_overlap", "tp_comm_overlap", boolean),
    _Key("memory", "reserve_bytes", "memory_reserve", checks.non_negative),
    _Key("memory", "fragmentation", "fragmentation", checks.non_negative),
)
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(key.section for key in KEYS))


@dataclass(frozen=True)
class RunFile:
    """What a run file says (see the module docstring); None: not stated, the command's
    default. ``model`` is a name or path, or a :class:`Model` stated inline; ``hardware`` a
    name or path. Paths are as the file wrote them; :attr:`folder` is where they are read
    from."""

    model: str | Model
    hardware: str
    batch: int | None = None
    microbatch_size: int | None = None
    optimizer: str | None = None
    master_weights: bool | None = None
    dtype: str | None = None
    seq_length: int | None = None
    tensor_parallel: int | None = None
    sequence_parallel: bool | None = None
    pipeline_parallel: int | None = None
    data_parallel: int | None = None
    zero: int | None = None
    reshard_after_forward: str | None = None
    context_parallel: int | None = None
    cp_comm_type: str | None = None
    expert_parallel: int | None = None
    expert_tensor_parallel: int | None = None
    offload_optimizer: bool | None = None
    offload_activations: int | None = None
    recompute: str | None = None
    tensor_across_nodes: bool | None = None
    schedule: str | None = None
    chunks: int | None = None
    microbatches: int | None = None
    partition: str | None = None
    remat: bool | None = None
    memory_limit: int | None = None
    steps: int | None = None
    recipe: str | None = None
    overlap_grad_reduce: bool | None = None
    attention: str | None = None
    blocking_p2p: bool | None = None
    scatter_gather_p2p: bool | None = None
    tp_comm_overlap: bool | None = None
    memory_reserve: float | None = None
    fragmentation: float | None = None
    folder: Path = dataclasses.field(default=Path("."), compare=False)

    def stated(self) -> dict[str, Any]:
        """The attributes the file states (not None), in :data:`KEYS`' order."""
        return {
            key.attribute: getattr(self, key.attribute)
            for key in KEYS
            if getattr(self, key.attribute) is not None
        }

    def located(self, name: str) -> str:
        """``name`` (the model's or the hardware's) as the process can open it: a relative
        path that exists beside the run file is read from there; a catalogue name stays."""
        if os.path.isabs(name) or not name.endswith((".toml", ".json")):
            return name
        beside = self.folder / name
        return str(beside) if beside.exists() else name

    @property
    def world_size(self) -> int:
        """Devices in all: T x CP x K x D (each 1 where not stated)."""
        return (
            (self.tensor_parallel or 1)
            * (self.context_parallel or 1)
            * (self.pipeline_parallel or 1)
            * (self.data_parallel or 1)
        )


def load_run_file(path: str | Path) -> RunFile:
    """Read a run file; every error names the file and the key."""
    return run_file_from_table(read_toml(path, "run"), f"run file {str(path)!r}", Path(path).parent)


def parse_run_file(text: str, where: str = "run file", folder: Path = Path(".")) -> RunFile:
    """A run file's text (what :func:`run_file_toml` wrote) read back."""
    return run_file_from_table(parse_toml(text.encode(), where), where, folder)


def run_file_from_table(table: dict[str, Any], where: str, folder: Path) -> RunFile:
    """A :class:`RunFile` from a parsed run file ``table``."""
    try:
        return _from_table(table, folder)
    except SpecError as error:
        raise SpecError(f"{where}: {error}") from None


def _from_table(table: dict[str, Any], folder: Path) -> RunFile:
    root = Fields(table, "")
    model: str | Model
    if isinstance(table.get("model"), dict):
        model = model_from_table(root.take("model", lambda _f, v: v), "[model]", prefix="model")
    else:
        model = root.take("model", string)
    values: dict[str, Any] = {"model": model, "hardware": root.take("hardware", string)}
    for section in SECTIONS:
        if not root.has(section):
            continue
        fields = root.table(section)
        for key in KEYS:
            if key.section == section and fields.has(key.key):
                values[key.attribute] = fields.take(key.key, key.read)
        fields.done()
    unknown = sorted(set(table) - {"model", "hardware", *SECTIONS})
    if unknown:
        raise SpecError(
            f"unknown key(s) {few(unknown)}: a run file holds model, hardware and the "
            f"tables {', '.join(f'[{s}]' for s in SECTIONS)}"
        )
    root.done()
    return RunFile(**values, folder=folder)


def run_file_table(run: RunFile) -> dict[str, Any]:
    """``run`` as the table :func:`run_file_from_table` reads back to an equal run file."""
    table: dict[str, Any] = {
        "model": run.model if isinstance(run.model, str) else None,
        "hardware": run.hardware,
    }
    for section in SECTIONS:
        entries: dict[str, Any] = {}
        for key in KEYS:
            value = getattr(run, key.attribute)
            if key.section != section or value is None:
                continue
            if key.attribute == "partition" and value.replace(",", "").isdigit():
                value = [int(part) for part in value.split(",")]
            elif key.attribute == "recompute" and value.isdigit():
                value = int(value)
            elif key.attribute == "optimizer" and _is_number(value):
                value = int(value) if value.isdigit() else float(value)
            entries[key.key] = value
        table[section] = entries or None
    if isinstance(run.model, Model):
        table["model"] = model_table(run.model)  # last: a table follows the plain keys
    return table


def run_file_toml(run: RunFile, header: tuple[str, ...] = ()) -> str:
    """``run`` as a run file's text, ``header`` its opening comment lines."""
    return toml_text(run_file_table(run), header=header)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
