"""The one table from the library's fields to the command line's flags.

The library names a field at fault by its own name (:func:`pipesim.errors.named`:
``tensor_parallel 3 must divide the model's heads``); while a command runs, :func:`cli.main.main`
spells every field of this table as its flag (``--tensor-parallel 3 must divide ...``), so the
messages a user reads speak the options they typed, and the library speaks none. A field that
names what writes a file (``saved_run``) is spelled as the command that writes it.
"""

from __future__ import annotations

from types import MappingProxyType

FLAGS: MappingProxyType[str, str] = MappingProxyType(
    {
        "activation_bytes": "--activation-bytes",
        "allow_ignored": "--allow-ignored",
        "attention": "--attention",
        "batch": "--batch",
        "chunks": "--chunks",
        "chunks_per_device": "-v/--chunks",
        "cluster": "--cluster",
        "context_parallel": "--context-parallel",
        "cp_comm_type": "--context-exchange",
        "data_parallel": "--data-parallel",
        "devices": "--devices",
        "dtype": "--dtype",
        "expert_parallel": "--expert-parallel",
        "expert_tensor_parallel": "--expert-tensor-parallel",
        "fragmentation": "--fragmentation",
        "hardware": "--hardware",
        "master_weights": "--master-weights",
        "memory_limit": "--memory-limit",
        "memory_limit_bytes": "--memory-limit-bytes",
        "memory_limits": "--memory-limits",
        "memory_reserve": "--memory-reserve",
        "microbatch_size": "--microbatch-size",
        "microbatches": "-M",
        "model": "--model",
        "offload_activations": "--offload-activations",
        "offload_optimizer": "--offload-optimizer",
        "optimizer": "--optimizer",
        "overlap_grad_reduce": "--overlap-grad-reduce",
        "partition": "--partition",
        "pipeline_devices": "-K",
        "placement": "--placement",
        "recipe": "--recipe",
        "recompute": "--recompute",
        "remat": "--remat",
        "reshard_after_forward": "--reshard-after-forward",
        "resume": "--resume",
        "saved_records": "pipesim validate (results.json)",
        "saved_run": "pipesim simulate --save",
        "saved_sweep": "pipesim sweep --out FILE.json",
        "schedule": "--schedule",
        "schedules": "--schedules",
        "seq_length": "--seq-length",
        "sequence_parallel": "--sequence-parallel",
        "tensor_across_nodes": "--tensor-across-nodes",
        "tensor_parallel": "--tensor-parallel",
        "top": "--top",
        "world_size": "--world-size",
        "zero": "--zero",
    }
)
