"""The split backward (I then W) against ordinary autograd, op counts per phase, and its state.

Reference: ``torch.autograd.backward`` on an identical copy of the model and input, and
:func:`backward_full`. In float64 the split must agree to 1e-12 relative: it runs the same
kernels on the same gradients, only in two autograd calls instead of one.
"""

from __future__ import annotations

import copy
import gc
import itertools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.func import functional_call
from torch.utils._python_dispatch import TorchDispatchMode

from executor.split_backward import (
    WeightGradState,
    WeightGradStateError,
    backward_full,
    backward_input,
    backward_weight,
)

F64 = torch.float64
RTOL = 1e-12
MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "matmul", "linear", "baddbmm", "addbmm"})

Grads = tuple[torch.Tensor | None, ...]


# --------------------------------------------------------------------------- helpers


class MatmulCounter(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts the aten matmul-type ops dispatched while active (backward ops included)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.count = 0

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if func.overloadpacket.__name__ in MATMUL_OPS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def assert_rel_close(actual: torch.Tensor | None, expected: torch.Tensor | None, what: str) -> None:
    """Equal within RTOL of the expected tensor's largest magnitude (both None also passes)."""
    if expected is None or actual is None:
        assert actual is None and expected is None, f"{what}: {actual} vs {expected}"
        return
    assert actual.shape == expected.shape, what
    scale = max(expected.abs().max().item(), 1e-300)
    error = (actual - expected).abs().max().item()
    assert error <= RTOL * scale, f"{what}: max error {error:.3e}, scale {scale:.3e}"


def assert_same_grads(got: Sequence[nn.Parameter], want: Sequence[nn.Parameter]) -> None:
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert_rel_close(a.grad, b.grad, f"param {i} ({tuple(a.shape)})")


def mlp(widths: Sequence[int], bias: bool, activation: str, seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(widths)):
        layers.append(nn.Linear(n_in, n_out, bias=bias))
        if i < len(widths) - 2:
            layers.append(
                {"relu": nn.ReLU(), "gelu": nn.GELU(), "tanh": nn.Tanh(), "relu_": nn.ReLU(True)}[
                    activation
                ]
            )
    return nn.Sequential(*layers).to(F64)


class HandAttention(nn.Module):
    """Single-head-per-slice attention written out with matmuls (no fused kernel)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5
        mixed = torch.softmax(scores, dim=-1) @ v
        result: torch.Tensor = self.out(mixed.transpose(1, 2).reshape(b, s, d))
        return result


class Block(nn.Module):
    """Pre-norm transformer block: LayerNorm, attention, residual, LayerNorm, GELU MLP, residual."""

    def __init__(self, d: int, heads: int, attention: str, loss: bool) -> None:
        super().__init__()
        self.attention = attention
        self.loss = loss
        self.ln1 = nn.LayerNorm(d)
        self.ln2 = nn.LayerNorm(d)
        self.hand = HandAttention(d, heads)
        self.mha = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        if self.attention == "hand":
            x = x + self.hand(h)
        else:
            x = x + self.mha(h, h, h, need_weights=self.attention == "mha_weights")[0]
        x = x + self.mlp(self.ln2(x))
        return x.square().mean() if self.loss else x


def block(d: int, heads: int, attention: str, loss: bool, seed: int) -> Block:
    torch.manual_seed(seed)
    return Block(d, heads, attention, loss).to(F64)


def randn(shape: Sequence[int], seed: int) -> torch.Tensor:
    return torch.randn(tuple(shape), generator=torch.Generator().manual_seed(seed), dtype=F64)


def leaf(x: torch.Tensor, requires_grad: bool = True) -> torch.Tensor:
    return x.detach().clone().requires_grad_(requires_grad)


def split_backward(
    model: nn.Module, x: torch.Tensor, grad: torch.Tensor | None
) -> tuple[Grads, WeightGradState]:
    """Forward, then I; W is left to the caller."""
    out = model(x)
    return backward_input(out, grad, x, list(model.parameters()))


def check_against_references(
    model: nn.Module, x: torch.Tensor, grad: torch.Tensor | None, input_grad: bool = True
) -> None:
    """I then W == backward_full == torch.autograd.backward, for inputs and parameters."""
    via_full, via_autograd = copy.deepcopy(model), copy.deepcopy(model)
    for original, *copies in zip(
        model.parameters(), via_full.parameters(), via_autograd.parameters(), strict=True
    ):
        for p in copies:  # deepcopy drops .grad; an existing one must be accumulated into
            p.grad = None if original.grad is None else original.grad.clone()
    x_split, x_full, x_auto = (leaf(x, input_grad) for _ in range(3))

    (dx_split,), state = split_backward(model, x_split, grad)
    backward_weight(state)
    (dx_full,) = backward_full(via_full(x_full), grad, x_full, list(via_full.parameters()))
    torch.autograd.backward(via_autograd(x_auto), grad)

    assert_rel_close(dx_split, x_auto.grad, "input grad (split vs autograd)")
    assert_rel_close(dx_full, x_auto.grad, "input grad (backward_full vs autograd)")
    assert_same_grads(list(model.parameters()), list(via_autograd.parameters()))
    assert_same_grads(list(via_full.parameters()), list(via_autograd.parameters()))


# --------------------------------------------------------------------------- strategies

widths_st = st.lists(st.integers(1, 7), min_size=2, max_size=5)  # depth 1-4
activation_st = st.sampled_from(["relu", "gelu", "tanh", "relu_"])
seed_st = st.integers(0, 2**16)


# --------------------------------------------------------------------------- equality


@given(widths_st, st.booleans(), activation_st, st.integers(1, 4), seed_st)
def test_mlp_split_equals_full_backward(
    widths: list[int], bias: bool, activation: str, batch: int, seed: int
) -> None:
    model = mlp(widths, bias, activation, seed)
    check_against_references(
        model, randn((batch, widths[0]), seed), randn((batch, widths[-1]), ~seed)
    )


@given(
    st.sampled_from([(4, 1), (4, 2), (6, 3), (8, 2)]),
    st.sampled_from(["hand", "mha", "mha_weights"]),
    st.booleans(),
    st.integers(1, 2),
    st.integers(1, 4),
    seed_st,
)
def test_transformer_block_split_equals_full_backward(
    dims: tuple[int, int], attention: str, loss: bool, batch: int, seq: int, seed: int
) -> None:
    d, heads = dims
    model = block(d, heads, attention, loss, seed)
    grad = None if loss else randn((batch, seq, d), ~seed)
    check_against_references(model, randn((batch, seq, d), seed), grad)


@given(widths_st, st.booleans(), seed_st)
def test_input_without_grad_leaves_everything_to_w(
    widths: list[int], bias: bool, seed: int
) -> None:
    """No input needs a gradient (a first stage): I returns None, W does the whole backward."""
    model = mlp(widths, bias, "tanh", seed)
    x = randn((2, widths[0]), seed)
    (dx,), state = split_backward(model, leaf(x, False), randn((2, widths[-1]), ~seed))
    assert dx is None
    assert state.captured_grads() == []
    check_against_references(model, x, randn((2, widths[-1]), ~seed), input_grad=False)


@given(st.integers(1, 3), seed_st)
def test_two_microbatches_accumulate_like_two_full_backwards(batch: int, seed: int) -> None:
    """I1, I2, W2, W1 (a zero-bubble order) accumulates .grad as two full backwards do."""
    model = mlp([3, 5, 4, 2], True, "gelu", seed)
    reference = copy.deepcopy(model)
    xs = [randn((batch, 3), seed + k) for k in range(2)]
    grads = [randn((batch, 2), ~seed - k) for k in range(2)]

    states = [split_backward(model, leaf(x), g)[1] for x, g in zip(xs, grads, strict=True)]
    for state in reversed(states):
        backward_weight(state)
    for x, g in zip(xs, grads, strict=True):
        torch.autograd.backward(reference(leaf(x)), g)
    assert_same_grads(list(model.parameters()), list(reference.parameters()))


def test_w_adds_to_an_existing_grad() -> None:
    model = mlp([3, 4, 2], True, "tanh", 0)
    reference = copy.deepcopy(model)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        p.grad = torch.full_like(p, 0.5)
        q.grad = torch.full_like(q, 0.5)
    x, g = randn((2, 3), 1), randn((2, 2), 2)
    backward_weight(split_backward(model, leaf(x), g)[1])
    torch.autograd.backward(reference(leaf(x)), g)
    assert_same_grads(list(model.parameters()), list(reference.parameters()))


# --------------------------------------------------------------------------- op counts


def count_phases(model: nn.Module, x: torch.Tensor, grad: torch.Tensor) -> tuple[int, int, int]:
    """Matmul-type ops in I, in W, and in one ordinary backward of a copy of the model."""
    reference = copy.deepcopy(model)
    out = model(x)
    with MatmulCounter() as in_i:
        _, state = backward_input(out, grad, x, list(model.parameters()))
    with MatmulCounter() as in_w:
        backward_weight(state)
    out_ref = reference(leaf(x, x.requires_grad))
    with MatmulCounter() as in_full:
        torch.autograd.backward(out_ref, grad)
    return in_i.count, in_w.count, in_full.count


@given(st.integers(1, 4), st.booleans(), st.integers(1, 6), seed_st)
def test_i_does_no_weight_work_and_w_no_input_work(
    layers: int, bias: bool, width: int, seed: int
) -> None:
    """An L-layer MLP whose input needs a gradient: full = 2L matmuls, I = L (each layer's dX,
    the first one included because the stage input's gradient goes upstream), W = L (one dW
    per weight matrix; bias gradients are sums, not matmuls)."""
    model = mlp([width] * (layers + 1), bias, "relu", seed)
    x = leaf(randn((3, width), seed))
    in_i, in_w, in_full = count_phases(model, x, randn((3, width), ~seed))
    assert (in_i, in_w, in_full) == (layers, layers, 2 * layers)


@given(st.integers(1, 4), st.booleans(), seed_st)
def test_without_input_grad_i_is_empty_and_w_is_the_full_backward(
    layers: int, bias: bool, seed: int
) -> None:
    """Input not requiring grad: the first layer's dX is skipped by everyone (full = 2L - 1);
    with no input path I has nothing to do (0), and W does all of it (2L - 1), rather than
    I doing the L - 1 dX of the upper layers."""
    model = mlp([4] * (layers + 1), bias, "tanh", seed)
    x = leaf(randn((2, 4), seed), False)
    in_i, in_w, in_full = count_phases(model, x, randn((2, 4), ~seed))
    assert (in_i, in_w, in_full) == (0, 2 * layers - 1, 2 * layers - 1)


@pytest.mark.parametrize("attention", ["hand", "mha_weights"])
def test_transformer_block_w_does_one_matmul_per_weight_matrix(attention: str) -> None:
    """Four weight matrices (qkv/in_proj, out projection, two MLP layers): W does 4 matmuls and
    I does all the others (the attention matmuls have no weight, they are input path)."""
    model = block(8, 2, attention, False, 3)
    x = leaf(randn((2, 5, 8), 4))
    in_i, in_w, in_full = count_phases(model, x, randn((2, 5, 8), 5))
    assert in_w == 4
    assert in_i + in_w == in_full
    assert in_i > 4  # dX of the four projections plus the attention matmuls


# --------------------------------------------------------------------------- edge cases


class TiedTwice(nn.Module):
    """The same Linear applied twice (weight tying inside the stage), plus an unused layer."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)
        self.unused = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.head(self.shared(torch.relu(self.shared(x))))
        return result


def test_tied_weights_and_unused_params() -> None:
    torch.manual_seed(0)
    model = TiedTwice().to(F64)
    model.unused.weight.grad = torch.ones_like(model.unused.weight)
    x, g = randn((3, 4), 1), randn((3, 2), 2)
    check_against_references(model, x, g)
    assert torch.equal(model.unused.weight.grad, torch.ones(3, 3, dtype=F64))
    assert model.unused.bias.grad is None


def test_tied_weights_cost_one_repeated_input_matmul_in_w() -> None:
    """A known cost, pinned so a change is noticed: the W call for the tied weight starts at both
    uses and must run the input path from the outer use down to the inner one (one dX matmul,
    made harmless by the clamping hooks). I = 3 dX, W = 3 dW + 1 repeated dX, full = 6."""
    torch.manual_seed(0)
    model = TiedTwice().to(F64)
    x = leaf(randn((3, 4), 1))
    in_i, in_w, in_full = count_phases(model, x, randn((3, 2), 2))
    assert (in_i, in_w, in_full) == (3, 4, 6)


def test_bias_only_params_as_plain_leaves() -> None:
    """Elementwise scale/shift parameters (no matmul at all), given as plain leaf tensors."""
    scale = leaf(randn((5,), 1))
    shift = leaf(randn((5,), 2))
    x = leaf(randn((3, 5), 3))
    g = randn((3, 5), 4)
    (dx,), state = backward_input(torch.tanh(x * scale + shift), g, x, [scale, shift])
    assert scale.grad is None and shift.grad is None  # nothing before W
    backward_weight(state)
    s2, b2, x2 = leaf(scale), leaf(shift), leaf(x)
    torch.autograd.backward(torch.tanh(x2 * s2 + b2), g)
    assert_rel_close(dx, x2.grad, "dx")
    assert_rel_close(scale.grad, s2.grad, "scale")
    assert_rel_close(shift.grad, b2.grad, "shift")


def test_functional_call_on_a_weight_snapshot() -> None:
    """Stale-weight execution: grads land on the snapshot tensors, not on the module."""
    model = mlp([3, 4, 2], True, "gelu", 7)
    snapshot = {n: leaf(p) for n, p in model.named_parameters()}
    x, g = leaf(randn((2, 3), 1)), randn((2, 2), 2)
    out = functional_call(model, snapshot, (x,))
    (dx,), state = backward_input(out, g, x, list(snapshot.values()))
    backward_weight(state)
    assert all(p.grad is None for p in model.parameters())
    x2 = leaf(x)
    torch.autograd.backward(model(x2), g)
    assert_rel_close(dx, x2.grad, "dx")
    for name, p in model.named_parameters():
        assert_rel_close(snapshot[name].grad, p.grad, name)


@pytest.mark.parametrize("split", [True, False])
def test_new_grad_does_not_alias_returned_or_given_tensors(split: bool) -> None:
    """For ``x + b`` autograd hands the very same tensor (the grad_output) to x and to b. The
    first .grad must be a copy: otherwise the next micro-batch's in-place accumulation would
    write into the gradient returned for x and into the caller's grad_output."""
    b = leaf(randn((2, 3), 1))
    grads = [randn((2, 3), 2), randn((2, 3), 3)]
    kept = [g.clone() for g in grads]
    returned = []
    for k, g in enumerate(grads):
        x = leaf(randn((2, 3), 10 + k))
        if split:
            (dx,), state = backward_input(x + b, g, x, [b])
            backward_weight(state)
        else:
            (dx,) = backward_full(x + b, g, x, [b])
        assert dx is not None
        returned.append(dx)
    for g, want in zip(grads, kept, strict=True):
        assert torch.equal(g, want), "a caller's grad_output was modified"
    for dx, want in zip(returned, kept, strict=True):
        assert torch.equal(dx, want), "a returned input gradient was modified"
    assert b.grad is not None and torch.equal(b.grad, kept[0] + kept[1])


@pytest.mark.parametrize("split", [True, False])
def test_a_param_listed_twice_is_accumulated_once(split: bool) -> None:
    model = mlp([3, 4, 2], True, "tanh", 5)
    reference = copy.deepcopy(model)
    x, g = leaf(randn((2, 3), 1)), randn((2, 2), 2)
    params = [*model.parameters(), *model.parameters()]
    if split:
        backward_weight(backward_input(model(x), g, x, params)[1])
    else:
        backward_full(model(x), g, x, params)
    torch.autograd.backward(reference(leaf(x)), g)
    assert_same_grads(list(model.parameters()), list(reference.parameters()))


def test_scalar_loss_needs_no_grad_output_but_a_tensor_output_does() -> None:
    model = mlp([3, 4, 2], True, "relu", 1)
    x = leaf(randn((2, 3), 1))
    with pytest.raises(ValueError, match="shape"):
        backward_input(model(x), None, x, list(model.parameters()))
    check_against_references(block(4, 2, "hand", True, 2), randn((1, 3, 4), 3), None)


def test_multiple_outputs_and_multiple_inputs() -> None:
    """Outputs: one from both inputs, one depending on weights only, one without grad (a mask).
    Inputs: one used, one unused; the unused one gets None."""
    torch.manual_seed(0)
    lin, other = nn.Linear(3, 3).to(F64), nn.Linear(3, 3).to(F64)
    params = [*lin.parameters(), *other.parameters()]

    def forward(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> list[torch.Tensor]:
        h = lin(a)
        return [h * b, other.weight.square().sum() * h.sum().detach(), (h > 0).to(F64)]

    inputs = [randn((2, 3), 1), randn((2, 3), 2), randn((2, 3), 3)]
    grads = [randn((2, 3), 4), None, randn((2, 3), 5)]
    ins = [leaf(t) for t in inputs]
    dxs, state = backward_input(forward(*ins), grads, ins, params)
    backward_weight(state)
    split_grads = [p.grad for p in params]
    for p in params:
        p.grad = None

    ref_ins = [leaf(t) for t in inputs]
    outs = forward(*ref_ins)
    torch.autograd.backward(outs[:2], grads[:2])
    assert dxs[2] is None
    for got, ref in zip(dxs, ref_ins, strict=True):
        assert_rel_close(got, ref.grad, "input grad")
    for got, p in zip(split_grads, params, strict=True):
        assert_rel_close(got, p.grad, "param grad")


def test_custom_function_intermediate_survives_dropping_the_outputs() -> None:
    """Custom autograd.Function nodes as intermediates, output dropped before W. In older torch
    such a node's Python object did not own it (the state keeps the outputs' edges to hold the
    graph); torch 2.13 makes the Python object an owner, so there this guards older versions."""

    class Matmul(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(x, w)
            return x @ w.t()

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            x, w = ctx.saved_tensors
            return grad @ w, grad.t() @ x

    w1, w2 = leaf(randn((4, 3), 1)), leaf(randn((2, 4), 2))
    x, g = leaf(randn((5, 3), 3)), randn((5, 2), 4)

    def forward(inp: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        inner = Matmul.apply(inp, a)  # type: ignore[no-untyped-call]
        result: torch.Tensor = Matmul.apply(torch.tanh(inner), b)  # type: ignore[no-untyped-call]
        return result

    (dx,), state = backward_input(forward(x, w1, w2), g, x, [w1, w2])
    gc.collect()
    backward_weight(state)
    r1, r2, rx = leaf(w1), leaf(w2), leaf(x)
    torch.autograd.backward(forward(rx, r1, r2), g)
    assert_rel_close(dx, rx.grad, "dx")
    assert_rel_close(w1.grad, r1.grad, "w1")
    assert_rel_close(w2.grad, r2.grad, "w2")


def test_non_reentrant_checkpoint_inside_the_stage() -> None:
    from torch.utils.checkpoint import checkpoint

    model = mlp([3, 5, 4], True, "gelu", 4)

    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            result: torch.Tensor = checkpoint(self.inner, x, use_reentrant=False)
            return result

    check_against_references(Checkpointed(), randn((2, 3), 1), randn((2, 4), 2))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda x, p: backward_input(x * p[0], torch.ones(3), x, [x]), "also one of the inputs"),
        (lambda x, p: backward_input(x * p[0], torch.ones(3), x * 2, p), "not a leaf"),
        (lambda x, p: backward_input(x * p[0], torch.ones(4), x, p), "shape"),
        (lambda x, p: backward_input([x * p[0]], [None, None], x, p), "1 outputs but 2"),
        (lambda x, p: backward_full(x * p[0], torch.ones(3), x, [p[0] * 2]), "not a leaf"),
    ],
)
def test_bad_arguments_are_rejected(
    call: Callable[[torch.Tensor, list[torch.Tensor]], object], message: str
) -> None:
    x, w = leaf(randn((3,), 1)), leaf(randn((3,), 2))
    with pytest.raises(ValueError, match=message):
        call(x, [w])


# --------------------------------------------------------------------------- state lifecycle


def fresh_state(model: nn.Module, seed: int = 0) -> tuple[WeightGradState, torch.Tensor]:
    """I on a new micro-batch; the output is returned so a test can keep the graph alive."""
    x = leaf(randn((2, 3), seed))
    out = model(x)
    _, state = backward_input(out, randn((2, 2), ~seed), x, list(model.parameters()))
    return state, out


def test_w_twice_raises() -> None:
    model = mlp([3, 4, 2], True, "relu", 0)
    state, _ = fresh_state(model)
    backward_weight(state)
    before = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    assert state.consumed
    with pytest.raises(WeightGradStateError, match="already called"):
        backward_weight(state)
    for old, p in zip(before, model.parameters(), strict=True):
        assert old is not None and p.grad is not None and torch.equal(old, p.grad)


@pytest.mark.parametrize("which", ["weight", "bias"])
def test_w_after_the_weights_changed_raises(which: str) -> None:
    """An optimizer step between I and W is a scheduling bug. A changed weight is also caught by
    autograd's saved-tensor check (wrapped into the same error); a bias is not saved by any
    node, so only the state's own version check catches it."""
    model = mlp([3, 4, 2], True, "relu", 0)
    state, _ = fresh_state(model)
    with torch.no_grad():
        getattr(model[0], which).mul_(0.5)
    with pytest.raises(WeightGradStateError, match="modified"):
        backward_weight(state)
    assert all(p.grad is None for p in model.parameters())


def test_w_on_a_graph_freed_by_another_backward_raises() -> None:
    model = mlp([3, 4, 2], True, "relu", 0)
    state, out = fresh_state(model)
    torch.autograd.backward(out, torch.ones_like(out))  # frees the saved tensors
    with pytest.raises(WeightGradStateError, match="freed"):
        backward_weight(state)
    assert state.consumed and not state.holds_graph


def test_i_hooks_are_gone_after_i() -> None:
    """Another backward through the retained graph after I must not overwrite what I captured."""
    model = mlp([3, 4, 2], True, "tanh", 0)
    reference = copy.deepcopy(model)
    x, g = leaf(randn((2, 3), 1)), randn((2, 2), 2)
    out = model(x)
    _, state = backward_input(out, g, x, list(model.parameters()))
    torch.autograd.grad(out, x, 100 * g, retain_graph=True)
    backward_weight(state)
    torch.autograd.backward(reference(leaf(x)), g)
    assert_same_grads(list(model.parameters()), list(reference.parameters()))


@pytest.mark.parametrize("tied", [False, True])
def test_w_releases_captured_grads_hooks_and_graph(tied: bool) -> None:
    """After W, nothing of I's capture survives: captured gradients (also referenced by W's
    clamping hooks in the tied case) are freed even while the caller still holds the output.
    An activation saved only for a dW is freed by W itself when it can run without retaining
    the graph (untied), and in any case once the caller drops the output."""
    torch.manual_seed(0)
    model: nn.Module = TiedTwice().to(F64) if tied else mlp([3, 5, 2], True, "tanh", 0)
    width = 4 if tied else 3

    def forward() -> tuple[torch.Tensor, torch.Tensor, weakref.ref[torch.Tensor]]:
        x = leaf(randn((2, width), 1))
        hidden = x * 1.5  # saved only by the first layer's node (for its dW)
        return x, model(hidden), weakref.ref(hidden)

    x, out, hidden_ref = forward()
    _, state = backward_input(out, randn(tuple(out.shape), 2), x, list(model.parameters()))
    captured = [weakref.ref(t) for t in state.captured_grads()]
    gc.collect()
    assert captured and state.holds_graph and hidden_ref() is not None

    backward_weight(state)
    gc.collect()
    assert not state.holds_graph and state.num_groups == 0
    assert all(ref() is None for ref in captured), "captured gradients outlive W"
    if not tied:
        assert hidden_ref() is None, "W kept a saved activation that only W needed"
    del out
    gc.collect()
    assert hidden_ref() is None, "the graph W ran on is still alive"
