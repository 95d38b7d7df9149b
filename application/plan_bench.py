"""The planner's benchmarks for ``pipesim bench``: ``pipesim plan`` on the runs users plan
(GPT-3 175B on 1,024 A100s, Llama 3 405B on 16,384 H100s, a 1T model on 65,536 A100s), each
over the classic space (T, K, D, schedule, v, M, b, recomputation, ZeRO-1) and with the newer
dimensions (ZeRO-3 / FSDP and context parallelism 2) added, each in a new process: its wall
time, the search's own time and configurations per second, and the best plan it returns (which
must not change where the space is the same: the bench prints it so that a change shows)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from pipesim.errors import RunFailed


@dataclass(frozen=True)
class PlanCase:
    """One ``pipesim plan`` run: a model on N devices of one hardware kind, a global batch."""

    model: str
    hardware: str
    devices: int
    batch: int

    def arguments(self, newer: bool) -> list[str]:
        """The command's arguments, with the newer dimensions or without."""
        words = ["plan", "--model", self.model, "--hardware", self.hardware]
        words += ["--devices", str(self.devices), "--batch", str(self.batch), "--json"]
        return words + (NEWER_DIMENSIONS if newer else [])


PLAN_CASES = (
    PlanCase("gpt3-175b", "a100", 1024, 1536),  # Megatron-LM's GPT-3 run (2104.04473)
    PlanCase("llama3-405b", "h100", 16384, 2048),  # Llama 3's 405B run (2407.21783 §3.3)
    PlanCase("megatron-1t", "a100", 65536, 8192),  # 2104.04473's 1T model, 64x its GPUs
)
NEWER_DIMENSIONS = ["--zero", "1,3", "--context-parallel", "1,2"]
"""What "with the new dimensions" adds: FSDP (ZeRO-3) beside ZeRO-1, and CP 2 beside none."""


@dataclass(frozen=True)
class PlanRate:
    """One plan's benchmark: wall time of the new process, the search's own seconds, the
    configurations in the space, examined (partitioned) and simulated, and the best plan."""

    case: PlanCase
    newer: bool
    wall_s: float
    search_s: float
    configurations: int
    examined: int
    simulated: int
    best: str
    best_iteration_s: float

    @property
    def configurations_per_s(self) -> float:
        """The space's configurations over the search's seconds."""
        return self.configurations / self.search_s if self.search_s > 0 else float("inf")

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.case.model,
            "hardware": self.case.hardware,
            "devices": self.case.devices,
            "batch": self.case.batch,
            "space": "with ZeRO-3 and CP 2" if self.newer else "classic",
            "wall_s": self.wall_s,
            "search_s": self.search_s,
            "configurations": self.configurations,
            "configurations_per_s": self.configurations_per_s,
            "examined": self.examined,
            "simulated": self.simulated,
            "best": self.best,
            "best_iteration_s": self.best_iteration_s,
        }


def _summary(plan: dict[str, Any]) -> str:
    """A plan in one line: its layout and schedule."""
    words = [f"T={plan['tensor_parallel']}", f"K={plan['devices']}", f"D={plan['data_parallel']}"]
    if plan.get("context_parallel", 1) > 1:
        words.append(f"CP={plan['context_parallel']}")
    if plan.get("expert_parallel", 1) > 1:
        words.append(f"EP={plan['expert_parallel']}")
    words += [f"ZeRO-{plan['zero']}", plan["schedule"], f"v={plan['chunks']}"]
    words += [f"M={plan['microbatches']}", f"b={plan['microbatch_size']}", plan["recompute"]]
    return " ".join(words)


def plan_rate(case: PlanCase, newer: bool) -> PlanRate:
    """``case`` planned in a new process (``python -m cli``), timed."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "cli", *case.arguments(newer)],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:  # one line, as the command line reports a failure
        last = done.stderr.strip().splitlines()[-1:] or ["no message"]
        raise RunFailed(f"pipesim {' '.join(case.arguments(newer))}: {last[0]}")
    report = json.loads(done.stdout)
    best = report["plans"][0]
    return PlanRate(
        case,
        newer,
        wall,
        float(report["seconds"]),
        int(report["evaluated"]),
        int(report["examined"]),
        int(report["simulated"]),
        _summary(best),
        float(best["iteration_time"]),
    )


def plan_rates(cases: tuple[PlanCase, ...] = PLAN_CASES) -> list[PlanRate]:
    """Every case, classic and with the newer dimensions."""
    return [plan_rate(case, newer) for case in cases for newer in (False, True)]
