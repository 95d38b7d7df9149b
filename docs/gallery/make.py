"""Regenerate the gallery: the figures a new user sees first, from the user guide's own commands.

    python docs/gallery/make.py [--out DIR]       # default: this folder

Each figure is made the way a user makes it: ``pipesim simulate --save`` or ``pipesim sweep
--out`` (run in-process), the saved file read back by :mod:`pipesim.export.saved` (the loader of
``pipesim plot``), drawn by :mod:`plots` and written at a modest resolution so the PNGs stay
small. It runs in seconds; CI runs it into a temporary folder (tests/plots/test_gallery.py).

Validation against a paper: GPipe's Table 2 beside pipesim's numbers (``pipesim reproduce
gpipe``). Validation against measurements is drawn from ``data/validation-quick.json``, a real
``pipesim validate --suite quick`` run kept beside this script (measuring takes minutes, not
seconds, and wants a quiet machine); it is left out while that file is missing. The planner's
Pareto figure is the README's ``pipesim plan`` example, drawn by ``plots.plan_figures``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import plots
from cli.main import main as pipesim
from pipesim.export import saved
from pipesim.plan import PlanSettings, plan
from plots.plan_figures import plan_figure as pareto_figure
from validation.reproduce.gpipe import table_2 as gpipe_table_2

HERE = Path(__file__).resolve().parent
DPI = 80
K, M = 4, 8
# Comparable costs: a full backward of 2, split into I = W = 1 by the zero-bubble schedules.
FULL, SPLIT, COMM = "1,2", "1,1,1", "0.05"
FAMILIES = [  # (schedule, chunks, what it shows)
    ("gpipe", 1, "fill-drain"),
    ("1f1b", 1, "one forward, one backward"),
    ("interleaved-1f1b", 2, "two chunks per device"),
    ("zb-h1", 1, "zero bubble: I/W split"),
    ("zbv", 2, "zero bubble V"),
    ("dualpipev", 2, "DualPipe cut in half"),
]


def run(*argv: str) -> None:
    """One pipesim command, in-process and quiet; a failure stops the gallery."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        status = pipesim(list(argv))
    if status != 0:
        raise SystemExit(f"pipesim {' '.join(argv)}: exit status {status}")


def simulate(work: Path, schedule: str, chunks: int, *extra: str) -> saved.SavedRun:
    path = work / f"{schedule}.json"
    costs = SPLIT if schedule.startswith(("zb", "dualpipe")) else FULL
    run(
        *("simulate", "--schedule", schedule, "-K", str(K), "-M", str(M), "-v", str(chunks)),
        *("--costs", costs, "--comm", COMM, "--activation-bytes", "1e6", "--save", str(path)),
        *extra,
    )
    return saved.load_run(str(path))


def sweep(work: Path, name: str, *argv: str) -> str:
    path = work / f"{name}.json"
    run("sweep", *argv, "--out", str(path))
    return str(path)


def make(out: Path) -> list[Path]:
    """Every gallery figure into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def keep(figure: Any, name: str) -> None:
        written.append(plots.save(figure, out / name, dpi=DPI))

    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        runs = {name: simulate(work, name, chunks) for name, chunks, _ in FAMILIES}
        for name, _, what in FAMILIES:
            r = runs[name]
            keep(
                plots.timeline_figure(r.compute, r.transfers, title=f"{r.title} ({what})"),
                f"timeline-{name}.png",
            )
        keep(
            plots.side_by_side_figure(
                [(runs[n].title, runs[n].compute, ()) for n in ("1f1b", "zb-h1", "zbv")]
            ),
            "compare-1f1b-zbh1-zbv.png",
        )
        keep(
            plots.side_by_side_figure(
                [
                    (runs[n].title, runs[n].compute, ())
                    for n in ("gpipe", "1f1b", "interleaved-1f1b")
                ]
            ),
            "compare-gpipe-1f1b-interleaved.png",
        )
        grid = sweep(
            work,
            "grid",
            *("--schedules", "gpipe,1f1b,zb-h1,zbv", "-K", "2,4,8", "-M", "4,8,16,32"),
            *("--costs", "1,2,1", "--activation-bytes", "1e6"),
        )
        keep(plots.throughput_figure(saved.load_sweep(grid, "speedup"), "speedup"), "speedup.png")
        keep(plots.bubble_figure(saved.load_sweep(grid, "bubble")), "bubble.png")
        a100 = sweep(
            work,
            "a100",
            *(
                "--schedules",
                "gpipe,1f1b,zb-h1,zbv,zb-h2,interleaved-zb",
                "-K",
                "8",
                "-M",
                "8,16,32",
            ),
            *("--model", "gpipe-transformer-48", "--hardware", "a100"),
        )
        keep(
            plots.throughput_figure(
                saved.load_sweep(a100, "throughput"),
                "normalized_throughput",
                title="GPipe's Transformer-48 on 8 x A100: throughput on one common baseline",
            ),
            "throughput-a100.png",
        )
        peaks = [r for r in saved.load_sweep(a100, "peak-memory") if r["microbatches"] == 8]
        keep(
            plots.peak_memory_figure(
                peaks, title="Transformer-48 on 8 x A100, M=8: peak memory per device"
            ),
            "peak-memory-a100.png",
        )
        hybrid = sweep(
            work,
            "hybrid",
            *("--schedules", "1f1b,interleaved-1f1b,zbv", "-K", "8", "-M", "16"),
            *("--model", "gpt3-175b", "--hardware", "a100", "--tensor-parallel", "8"),
            *("--sequence-parallel", "--recompute", "selective", "--microbatch-size", "1"),
            *("--data-parallel", "16", "--zero", "1", "--batch", "256"),
        )
        keep(
            plots.peak_memory_figure(
                saved.load_sweep(hybrid, "peak-memory"),
                title="GPT-3 175B: T=8 SP, K=8, D=16, ZeRO-1, M=16",
            ),
            "peak-memory-hybrid.png",
        )
        model_run = work / "memory.json"
        run(
            *("simulate", "--schedule", "1f1b", "-K", "4", "-M", "8", "--model"),
            *("gpipe-transformer-24", "--hardware", "a100", "--save", str(model_run)),
        )
        memory = saved.load_run(str(model_run))
        keep(
            plots.memory_timeline_figure(
                memory.memory, memory.capacity_bytes, title=f"Memory over time: {memory.title}"
            ),
            "memory-over-time.png",
        )
        _, table = gpipe_table_2()
        keep(
            plots.paper_vs_simulated_figure(
                [row for row in table if row["model"] == "gpipe-transformer-48"],
                "normalized throughput",
                title="GPipe Table 2, Transformer-48 on TPU v3: paper (dashed) and pipesim (solid)",
                baseline="the same model at K=2, M=1",
            ),
            "validation-gpipe-table2.png",
        )
    for name, draw in extras().items():
        keep(draw(), name)
    return written


def extras() -> dict[str, Callable[[], Any]]:
    """The figures beyond the families: the measured validation plot (when its kept real run
    is here), the planner's Pareto figure and the synthesised schedules' memory trade-off."""
    found: dict[str, Callable[[], Any]] = {}
    validation = HERE / "data" / "validation-quick.json"
    if validation.exists():
        records = saved.load_records(str(validation))
        found["validation-predicted-vs-measured.png"] = lambda: plots.predicted_vs_measured_figure(
            records
        )
        found["validation-speedup.png"] = lambda: plots.speedup_figure(records)
    found["plan-pareto.png"] = plan_figure
    found["synthesis-memory.png"] = synthesis_figure
    return found


def synthesis_figure() -> Any:
    """Schedules made to measure: GPT-1.3B on 4 A100s, M=12, the synthesised schedule for each
    memory limit from 1 to 2K-1 micro-batches in flight beside the fixed schedules."""
    from pipesim.config import RunConfig
    from pipesim.hardware import hardware
    from pipesim.request.cost_request import ModelRequest
    from pipesim.schedules import build
    from pipesim.synthesis.synthesis import memory_tradeoff
    from pipesim.workload import model
    from plots.synthesis_figures import memory_tradeoff_figure

    devices, microbatches = 4, 12
    run = RunConfig(model("gpt-1.3b"), hardware("a100"))
    costs = ModelRequest(run, batch=96).build(
        devices, 1, microbatches, build("1f1b", devices, microbatches)
    )
    fixed, curve = memory_tradeoff(costs, microbatches, range(1, 2 * devices))
    return memory_tradeoff_figure(
        fixed, curve, title="gpt-1.3b on 4 x a100, M=12: synthesised and fixed schedules"
    )


def plan_figure() -> Any:
    """The README's planner example: every configuration of Transformer-48 on 8 A100s at batch
    32, throughput against peak memory, the Pareto front marked (``pipesim plan --plot``)."""
    from pipesim.config import RunConfig
    from pipesim.hardware import hardware
    from pipesim.workload import model

    settings = PlanSettings(RunConfig(model("gpipe-transformer-48"), hardware("a100")), 8, 32)
    return pareto_figure(plan(settings, show_progress=False))


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="where the PNGs go (default: here)")
    for path in make(parser.parse_args().out):
        sys.stdout.write(f"{path}\n")


if __name__ == "__main__":
    cli()
