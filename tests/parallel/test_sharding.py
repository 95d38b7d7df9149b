"""What one rank holds of a layer under each ZeRO stage, inside a pipeline and without one:
literal tables by hand, and the order the stages must keep whatever the sizes."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim.parallel.config import Parallelism
from pipesim.parallel.sharding import HeldState, LayerBytes, ReshardPolicy, Sharding

# bf16 weights, fp32 gradients, Adam's two fp32 moments, fp32 master weights, a 2-byte
# temporary: what the catalogue's mixed-precision models carry per parameter
MIXED = LayerBytes(weight=2, gradient=4, optimizer=8, master=4, optimizer_temporary=2)
P = 1_000.0  # parameters of the layer on one tensor rank
D = 4


def held(zero: int, pipelined: bool, policy: ReshardPolicy = ReshardPolicy.DEFAULT) -> HeldState:
    return Sharding.of(zero, D, policy, pipelined).held(P, MIXED)


@pytest.mark.parametrize(
    ("zero", "pipelined", "expected"),
    [
        # weights, gradients, optimizer, master, optimizer temporaries, forward and backward
        # transients
        (0, True, (2000, 4000, 8000, 4000, 2000, 0, 0)),
        (1, True, (2000, 4000, 2000, 1000, 500, 0, 0)),
        # inside a pipeline PyTorch keeps ZeRO-2/3 gradients unsharded until the step's last
        # backward, and torchtitan's default keeps the gathered weights: ZeRO-1's memory
        (2, True, (2000, 4000, 2000, 1000, 500, 0, 0)),
        (3, True, (2000, 4000, 2000, 1000, 500, 0, 0)),
        (1, False, (2000, 4000, 2000, 1000, 500, 0, 0)),
        # without one: the gradients sharded, each layer's whole gradient alive in its
        # backward until its reduce-scatter
        (2, False, (2000, 1000, 2000, 1000, 500, 0, 4000)),
        # ZeRO-3 resharded after the forward: the fp32 master shard is the parameter; this
        # layer's and the next one's gathered weights while they run
        (3, False, (0, 1000, 2000, 1000, 500, 4000, 8000)),
    ],
)
def test_a_layers_state_per_rank(zero: int, pipelined: bool, expected: tuple[float, ...]) -> None:
    state = held(zero, pipelined)
    assert (
        state.parameter_bytes,
        state.gradient_bytes,
        state.optimizer_bytes,
        state.master_weight_bytes,
        state.optimizer_transient_bytes,
        state.forward_gather_bytes,
        state.backward_gather_bytes,
    ) == pytest.approx(expected)


def test_the_reshard_policy_decides_the_gathered_weights() -> None:
    """never: the whole layer stays gathered beside nothing else (the master is the shard);
    always inside a pipeline: gathered per pass, as without one."""
    kept = held(3, False, ReshardPolicy.NEVER)
    assert (kept.parameter_bytes, kept.forward_gather_bytes) == (2000, 0)
    regathered = held(3, True, ReshardPolicy.ALWAYS)
    assert (regathered.parameter_bytes, regathered.forward_gather_bytes) == (0, 4000)
    # inside a pipeline the gradients still wait for the last backward
    assert regathered.gradient_bytes == 4000


def test_a_model_without_master_weights_keeps_a_shard_of_its_own() -> None:
    """Pure bf16 training: ZeRO-3's shard at rest is in the weights' dtype, 1/D of them."""
    plain = LayerBytes(weight=2, gradient=2, optimizer=4, master=0, optimizer_temporary=0)
    state = Sharding.of(3, D, ReshardPolicy.DEFAULT, False).held(P, plain)
    assert state.parameter_bytes == pytest.approx(500)


def test_one_replica_shards_nothing() -> None:
    assert Sharding.of(3, 1, ReshardPolicy.ALWAYS, False) == Sharding(3, 1, False, False)
    assert held(0, False) == Sharding.of(0, 1, ReshardPolicy.DEFAULT, False).held(P, MIXED)


def test_the_regime_follows_torchtitans_default() -> None:
    assert ReshardPolicy.DEFAULT.reshards(pipelined=False)
    assert not ReshardPolicy.DEFAULT.reshards(pipelined=True)
    assert ReshardPolicy.ALWAYS.reshards(pipelined=True)
    assert not ReshardPolicy.NEVER.reshards(pipelined=False)
    parallelism = Parallelism(zero=3, data=8)
    assert parallelism.sharding(pipelined=False).syncs_every_microbatch
    assert not parallelism.sharding(pipelined=True).syncs_every_microbatch
    assert parallelism.sharding(pipelined=True).holds_gathered_weights
    assert "ZeRO-3" in parallelism.label()
    assert (
        "reshard-after-forward=never"
        in Parallelism(zero=3, data=8, reshard_after_forward=ReshardPolicy.NEVER).label()
    )


def _static(state: HeldState) -> float:
    return (
        state.parameter_bytes
        + state.gradient_bytes
        + state.optimizer_bytes
        + state.master_weight_bytes
    )


@given(
    weight=st.sampled_from([1.0, 2.0, 4.0]),
    gradient=st.sampled_from([2.0, 4.0]),
    optimizer=st.floats(0, 16),
    master=st.sampled_from([0.0, 4.0]),
    shards=st.integers(2, 4096),
    parameters=st.floats(1, 1e10),
)
def test_each_stage_holds_at_most_what_the_one_before_holds(
    weight: float,
    gradient: float,
    optimizer: float,
    master: float,
    shards: int,
    parameters: float,
) -> None:
    """Static memory never grows from one ZeRO stage to the next, but for ZeRO-3 inside a
    pipeline without master weights, whose shard at rest (1/D of the weights) sits beside the
    gathered whole; without a pipeline the static state of ZeRO-3 is 1/D of ZeRO-0's (with
    master weights, of all but the half-precision weights, which it does not keep at rest)."""
    per = LayerBytes(weight, gradient, optimizer, master, 0.0)
    for pipelined in (True, False):
        states = [
            Sharding.of(z, shards, ReshardPolicy.DEFAULT, pipelined).held(parameters, per)
            for z in range(4)
        ]
        statics = [_static(s) for s in states]
        allowance = [0.0, 0.0, 0.0]
        if pipelined and not master:
            allowance[2] = weight * parameters / shards
        for (before, after), extra in zip(itertools.pairwise(statics), allowance, strict=True):
            assert after <= (before + extra) * (1 + 1e-12)
    full = (gradient + optimizer + master) * parameters / shards
    at_rest = 0.0 if master else weight * parameters / shards
    fsdp = Sharding.of(3, shards, ReshardPolicy.DEFAULT, False).held(parameters, per)
    assert _static(fsdp) == pytest.approx(full + at_rest)
