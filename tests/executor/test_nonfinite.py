"""NaN and Inf are caught in the outputs of the action that produced them."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from executor import NonFiniteError, run_step, split_model
from executor.models import mlp
from executor.nonfinite import non_finite
from pipesim.schedules import build

INF = float("inf")


def test_non_finite_names_the_first_bad_tensor() -> None:
    finite = torch.ones(3)
    assert non_finite([finite, torch.arange(3)]) is None  # integers are always finite
    assert non_finite([finite, torch.tensor([1.0, INF])]) == "inf"
    assert non_finite([torch.tensor([INF, float("nan")])]) == "nan"  # NaN wins in a tensor
    assert non_finite([torch.tensor([-INF]), torch.tensor([float("nan")])]) == "inf"


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(4, 4, generator=generator), torch.randn(4, 4, generator=generator)


@pytest.mark.parametrize(
    ("name", "action", "what"),
    [
        ("1f1b", "0B0", "stage 0 backward of micro-batch 0"),
        ("zb-h1", "0W0", "stage 0 weight-gradient backward of micro-batch 0"),
    ],
)
def test_an_infinite_weight_gradient_names_its_backward(name: str, action: str, what: str) -> None:
    schedule = build(name, 2, 2)
    stages = split_model(mlp(4, 2), schedule)
    weight = next(stages[0].parameters())
    weight.register_hook(lambda grad: grad + INF)  # type: ignore[no-untyped-call]
    with pytest.raises(NonFiniteError) as error:
        run_step(schedule, stages, *batch(), nn.MSELoss(), check_finite=True)
    assert (
        str(error.value)
        == f"device 0: Inf first appeared in the output of {action} ({what}, step 0)"
    )


def test_a_nan_input_is_caught_in_the_first_forward() -> None:
    schedule = build("gpipe", 2, 2)
    x, y = batch()
    x[3, 0] = float("nan")  # micro-batch 1
    with pytest.raises(NonFiniteError, match=r"NaN first appeared in the output of 0F1 "):
        run_step(schedule, split_model(mlp(4, 2), schedule), x, y, nn.MSELoss(), check_finite=True)


def test_a_nan_loss_is_caught_on_the_last_stage() -> None:
    schedule = build("1f1b", 2, 2)
    x, y = batch()
    y[0, 0] = float("nan")  # the target of micro-batch 0: only the loss sees it
    with pytest.raises(
        NonFiniteError, match=r"^device 1: NaN first appeared in the output of 1F0 "
    ):
        run_step(schedule, split_model(mlp(4, 2), schedule), x, y, nn.MSELoss(), check_finite=True)


def test_the_check_is_off_by_default_in_run_step() -> None:
    schedule = build("gpipe", 2, 2)
    x, y = batch()
    x[0, 0] = float("nan")
    result = run_step(schedule, split_model(mlp(4, 2), schedule), x, y, nn.MSELoss())
    assert result.loss != result.loss


def test_finite_values_whose_sum_overflows_are_finite() -> None:
    """The fast path sums; an overflowing sum of finite values is confirmed element-wise."""
    huge = torch.full((4,), torch.finfo(torch.float32).max)
    assert not bool(torch.isfinite(huge.sum()))
    assert non_finite([huge]) is None
    assert non_finite([torch.full((3,), 60000.0, dtype=torch.float16)]) is None
    assert non_finite([torch.tensor([1.0, float("nan")], dtype=torch.bfloat16)]) == "nan"
    assert non_finite([torch.empty(0)]) is None
