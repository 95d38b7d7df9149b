"""``pipesim bench``: engine speed and sweep throughput on this machine (a table, and JSON)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from application.command_line import EXIT_OK, positive_int
from application.outputs import output_path, write_text_atomically
from cli.commands import command_summary
from pipesim.common.limits import Limit, check
from pipesim.errors import PipesimError
from pipesim.files.strict_json import json_text, write_json


def register(subparsers: Any) -> None:
    """Add ``bench``."""
    parser = subparsers.add_parser(
        "bench",
        help=command_summary("bench"),
        description="Time both engines on four large schedules (actions per second, build and "
        "validation apart), a planner-sized synthetic sweep and GPipe's Table 2 "
        "(configurations per second), and the peak memory of 1F1B at K=64 M=1024. Each "
        "figure is the best of a few runs.",
    )
    parser.add_argument(
        "--configs",
        type=positive_int,
        default=1000,
        metavar="N",
        help="configurations of the synthetic sweep (default 1000)",
    )
    parser.add_argument(
        "--no-simpy",
        action="store_true",
        help="leave the SimPy engine out (it takes most of the time)",
    )
    parser.add_argument(
        "--no-cluster",
        action="store_true",
        help="leave out the sweep on a local Dask cluster (it starts one: a few seconds)",
    )
    parser.add_argument(
        "--no-plans",
        action="store_true",
        help="leave out the planner's benchmarks (six plans in new processes: a minute or two)",
    )
    parser.add_argument(
        "--plans-only",
        action="store_true",
        help="only the planner's benchmarks: GPT-3 175B on 1,024 A100s, Llama 3 405B on 16,384 "
        "H100s, a 1T model on 65,536 A100s, each without and with ZeRO-3 and CP 2",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--out", metavar="FILE", help="also write the JSON to FILE")
    parser.set_defaults(handler=_bench)


def _bench(args: argparse.Namespace) -> int:
    from application import bench

    check(Limit.CONFIGS, args.configs, f"--configs {args.configs:,}")
    if args.plans_only and args.no_plans:
        raise PipesimError("--plans-only and --no-plans: give one of them")
    if args.out is not None:
        output_path(args.out, "--out")
    if args.plans_only:
        return _report({**bench.machine(), "plans": _plans()}, args)
    memory = bench.peak_memory_bytes()
    _, simulate_rss = bench.peak_rss_bytes(bench.SIMULATE_131K)
    plan_s, plan_rss = bench.peak_rss_bytes(bench.PLAN_16K)
    command = bench.command_end_to_end()
    # Interpreted first: nothing has loaded numba yet, so the fast engine runs in Python.
    end_to_end = {"interpreted": bench.end_to_end_s()}
    clustered = [] if args.no_cluster else bench.cluster_sweep(args.configs)
    sweeps = [
        bench.sweep_benchmark(args.configs, engine="fast", label="fast, interpreted"),
        bench.sweep_benchmark(
            args.configs, engine="fast", label="fast, interpreted", reuse_schedules=True
        ),
        bench.table_2_benchmark("fast", label="fast, interpreted"),
    ]
    engines = ("interpreted",) if args.no_simpy else ("simpy", "interpreted")
    rates = bench.engine_rates(engines=engines)
    if not args.no_simpy:
        sweeps.append(
            bench.sweep_benchmark(max(1, args.configs // 10), engine="simpy", label="simpy")
        )
        sweeps.append(bench.table_2_benchmark("simpy"))
    warm_up = bench.warm_up_s()
    if warm_up is not None:
        end_to_end["numba"] = bench.end_to_end_s()
        compiled = bench.engine_rates(engines=("numba",))
        for rate, more in zip(rates, compiled, strict=True):
            rate.simulate_s.update(more.simulate_s)
        sweeps.insert(1, bench.sweep_benchmark(args.configs, engine="fast", label="fast, numba"))
        sweeps.insert(
            3,
            bench.sweep_benchmark(
                args.configs, engine="fast", label="fast, numba", reuse_schedules=True
            ),
        )
        sweeps.insert(5, bench.table_2_benchmark("fast", label="fast, numba"))
    paths = bench.path_rates()
    report = {
        **bench.machine(),
        "engines": [r.to_json() for r in rates],
        "longest_paths": [p.to_json() for p in paths],
        "end_to_end_131k_s": {**end_to_end, **command},
        "sweeps": [s.to_json() for s in sweeps + clustered],
        "plan_16384_gpus_s": plan_s,
        "peak_memory_bytes": {"1f1b K=64 M=1024 (build, validate, simulate, JSON)": memory},
        "peak_rss_bytes": {
            "pipesim simulate 1f1b K=64 M=1024 --json": simulate_rss,
            "pipesim plan megatron-1t on 16,384 a100": plan_rss,
        },
        "numba_warm_up_s": warm_up,
    }
    if not args.no_plans:
        report["plans"] = _plans()
    return _report(report, args)


def _plans() -> list[dict[str, Any]]:
    from application.plan_bench import plan_rates

    return [rate.to_json() for rate in plan_rates()]


def _report(report: dict[str, Any], args: argparse.Namespace) -> int:
    """Write ``report`` where asked (--out), and print it (--json or the table)."""
    if args.out is not None:
        write_text_atomically(args.out, json_text(report, indent=2) + "\n", field="--out")
    if args.json:
        write_json(report)
        return EXIT_OK
    sys.stdout.write(_table(report))
    return EXIT_OK


def _plan_lines(plans: list[dict[str, Any]]) -> list[str]:
    lines = ["plans (each a new process; search seconds and configurations per second):"]
    for p in plans:
        what = f"{p['model']} on {p['devices']:,} {p['hardware']}, {p['space']}"
        lines.append(
            f"  {what:<52}{p['wall_s']:>7.1f} s wall, {p['search_s']:6.1f} s search, "
            f"{p['configurations']:>6,} configs ({p['configurations_per_s']:,.0f}/s), "
            f"{p['examined']:,} partitioned, {p['simulated']} simulated; best "
            f"{p['best']} {p['best_iteration_s']:.3f} s"
        )
    return lines


def _table(report: dict[str, Any]) -> str:
    if "engines" not in report:  # --plans-only
        lines = _plan_lines(report["plans"])
        lines.append(
            f"machine: {report['machine']}, {report['cpus']} CPUs, Python {report['python']}"
        )
        return "\n".join(lines) + "\n"
    lines = ["engine rates, actions per second (simulation; build+validate apart):"]
    names = sorted({n for r in report["engines"] for n in r["actions_per_s"]})
    header = f"  {'case':<32}{'actions':>9}{'build+validate':>16}" + "".join(
        f"{n:>20}" for n in names
    )
    lines.append(header)
    for r in report["engines"]:
        cells = "".join(f"{r['actions_per_s'].get(n, float('nan')):>20,.0f}" for n in names)
        lines.append(
            f"  {r['case']:<32}{r['actions']:>9,}{r['build_validate_actions_per_s']:>16,.0f}"
            + cells
        )
    lines.append("longest path on the same schedule, items per second (loops only):")
    for p in report["longest_paths"]:
        cells = ", ".join(f"{n} {r:,.0f}" for n, r in p["items_per_s"].items())
        same = "equal" if p["makespan_s"] == p["engine_makespan_s"] else "DIFFERENT"
        lines.append(f"  {p['case']:<32}{p['items']:>9,}  {cells}; makespans {same}")
    e = report["end_to_end_131k_s"]
    inside = ", ".join(f"{k} {e[k] * 1e3:.0f} ms" for k in ("interpreted", "numba") if k in e)
    lines.append(
        f"131,072-action 1F1B end to end: in one process {inside}; as a command "
        f"{e['command_s'] * 1e3:.0f} ms of which start-up {e['startup_s'] * 1e3:.0f} ms "
        f"(pipesim simulate --help), so {e['after_startup_s'] * 1e3:.0f} ms after it"
    )
    lines.append(
        f"start-up: pipesim --version {e['version_s'] * 1e3:.0f} ms, pipesim simulate --help "
        f"{e['startup_s'] * 1e3:.0f} ms, a 1f1b K=4 M=8 simulation {e['small_command_s'] * 1e3:.0f}"
        f" ms (bytecode caches written)"
    )
    lines.append(
        f"plan, megatron-1t on 16,384 a100 (a new process): {report['plan_16384_gpus_s']:.1f} s"
    )
    lines.append("sweeps:")
    for s in report["sweeps"]:
        lines.append(
            f"  {s['benchmark']}: {s['configs']} configurations in {s['total_s']:.3f} s = "
            f"{s['configs_per_s']:,.0f}/s, {s['configs_per_cpu_s']:,.0f} per CPU second "
            f"(median {s['median_ms']:.2f} ms, p95 {s['p95_ms']:.2f} ms)"
        )
    for what, size in report["peak_memory_bytes"].items():
        lines.append(f"peak memory, {what}: {size / 1e6:.0f} MB traced")
    for what, size in report["peak_rss_bytes"].items():
        lines.append(f"peak resident memory, {what}: {size / 1e6:.0f} MB")
    warm = report["numba_warm_up_s"]
    lines.append(
        "numba: not installed (pip install 'pipesim[fast]')"
        if warm is None
        else f"numba kernels loaded in {warm:.2f} s (import and cache; a first compile: longer)"
    )
    if "plans" in report:
        lines += _plan_lines(report["plans"])
    lines.append(f"machine: {report['machine']}, {report['cpus']} CPUs, Python {report['python']}")
    return "\n".join(lines) + "\n"
