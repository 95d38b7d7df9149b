"""Closed-form bubbles of the registered schedules, for equal stages and no communication.

Each form gives the idle time of one device per step from one stage's F, I and W (for v chunks
per device, one chunk's: 1/v of the device's share), or None outside the conditions under
which its paper states it. The registry attaches one form to each schedule that has one
(:attr:`~pipesim.schedules.registry.ScheduleInfo.closed_form`); a schedule loaded from a file
gets a form only when it is proven equal to the registered schedule of that name.

* GPipe, 1F1B: (K-1)(F+B), i.e. (K-1)/(M+K-1) (GPipe §2.2; Megatron-LM §2.2).
* Interleaved 1F1B (M a multiple of K) and looped BFS (M >= K): (K-1)(F+B) per chunk, i.e.
  (1/v)(K-1)/M of the ideal time (Megatron-LM, arXiv 2104.04473 §2.2).
* ZB-H1 (M >= K, T_W <= T_F; one step also T_W <= T_I): (K-1)(T_F+T_I-T_W)
  (Qi et al., arXiv 2401.10241 Table 2).
* ZB-H2 (M >= 2K-1, T_W <= T_F): back-to-back steps (K-1)·max(0, T_F+T_I-2T_W) (Table 2); a
  single step also pays the last device's start, (K-1)·max(T_F, T_F+T_I-2T_W).
* ZB-V (M >= 2K-1, T_F = T_I = T_W): zero for back-to-back steps (§6); (K-1)·T_F for one step.
* PipeDream, PipeDream-2BW: one step is 1F1B's; back-to-back steps never drain, so with
  M >= K the steady state has no bubble.
* DualPipe (T_W <= T_I <= T_F <= T_I + T_W): (K/2-1)(T_F+T_I-T_W), i.e. (K/2-1)(F+B-2W) with B
  the full backward, one step or back to back. The DeepSeek-V3 report (arXiv 2412.19437
  Table 2) gives (K/2-1)(F&B+B-3W), F&B an overlapped forward-backward pair: with no overlap
  (F&B = F+B) that is the idle of a pair run as one unit that starts once both its inputs are
  in (DualPipe's runtime receives both, then computes), exact for T_W <= T_I and T_F <= T_I.
  The IR runs a pair as two actions, the forward as soon as its activation is in, as the
  executor does, which hides one T_I per device pair: (K/2-1)(F&B+B-3W) - (K/2-1)T_I.

The conditions were found by checking each form against the engine over K <= 6, M <= 18 and
costs in {1, 2, 3}: inside them every case agrees exactly (tests/analysis/test_bubble.py);
DualPipe's over K <= 12, M <= 26 and costs in halves up to 4 (tests/schedules/test_dualpipe.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class BubbleTerms:
    """What a closed form reads: the shape of the step and one stage's times in seconds.

    ``backward_s`` is the full backward a stage runs, I + W, plus F again under
    re-materialization (the forward is re-run inside the backward).
    """

    devices: int
    microbatches: int
    forward_s: float
    input_grad_s: float
    weight_grad_s: float
    backward_s: float
    steps: int

    @property
    def one_step(self) -> bool:
        """True when the step is measured alone (no steady state to hide the ramp)."""
        return self.steps == 1


ClosedForm = Callable[[BubbleTerms], "float | None"]


def fill_drain(t: BubbleTerms) -> float | None:
    """GPipe and 1F1B: (K-1)(F+B)."""
    return (t.devices - 1) * (t.forward_s + t.backward_s)


def no_flush(t: BubbleTerms) -> float | None:
    """PipeDream and PipeDream-2BW: 1F1B's bubble for one step, none in the steady state."""
    if t.one_step:
        return fill_drain(t)
    return 0.0 if t.microbatches >= t.devices else None


def interleaved(t: BubbleTerms) -> float | None:
    """Interleaved 1F1B with M a multiple of K: (K-1)(F+B) of one chunk."""
    return fill_drain(t) if t.microbatches % t.devices == 0 else None


def looped_bfs(t: BubbleTerms) -> float | None:
    """Looped BFS with M >= K: (K-1)(F+B) of one chunk."""
    return fill_drain(t) if t.microbatches >= t.devices else None


def zb_h1(t: BubbleTerms) -> float | None:
    """ZB-H1 with M >= K and T_W <= T_F (one step: also T_W <= T_I): (K-1)(T_F+T_I-T_W)."""
    f, i, w = t.forward_s, t.input_grad_s, t.weight_grad_s
    if t.microbatches >= t.devices and w <= f and (w <= i or not t.one_step):
        return (t.devices - 1) * (f + i - w)
    return None


def zb_h2(t: BubbleTerms) -> float | None:
    """ZB-H2 with M >= 2K-1 and T_W <= T_F: (K-1)·max(floor, T_F+T_I-2T_W)."""
    f, i, w = t.forward_s, t.input_grad_s, t.weight_grad_s
    if t.microbatches >= 2 * t.devices - 1 and w <= f:
        floor = f if t.one_step else 0.0
        return (t.devices - 1) * max(floor, f + i - 2 * w)
    return None


def zbv(t: BubbleTerms) -> float | None:
    """ZB-V with M >= 2K-1 and T_F = T_I = T_W: zero back to back, (K-1)·T_F for one step."""
    f, i, w = t.forward_s, t.input_grad_s, t.weight_grad_s
    if t.microbatches >= 2 * t.devices - 1 and f == i == w:
        return (t.devices - 1) * f if t.one_step else 0.0
    return None


def dualpipe(t: BubbleTerms) -> float | None:
    """DualPipe with T_W <= T_I <= T_F <= T_I + T_W: (K/2-1)(T_F+T_I-T_W)."""
    f, i, w = t.forward_s, t.input_grad_s, t.weight_grad_s
    if t.devices % 2 == 0 and w <= i <= f <= i + w:
        return (t.devices // 2 - 1) * (f + i - w)
    return None
