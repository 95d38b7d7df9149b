"""What a rank knows of the tensors crossing each stage boundary, and the small header that
announces one.

Shapes are exchanged, not declared: the first activation across each stage boundary is
preceded by a header with its dtype and shape; gradients have the shape of the output their
receiver produced itself. The :class:`ShapeBook` is kept across steps (in
:class:`~executor.runtime.StepState`), so headers travel once per pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from executor.errors import ExecutorError

DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.uint8,
    torch.bool,
)
HEADER_LENGTH = 10  # dtype code, ndim, up to 8 sizes

TensorShape = tuple[tuple[int, ...], torch.dtype]


@dataclass
class ShapeBook:
    """``known[b]`` is the (shape, dtype) of stage b's output; ``announced`` the boundaries
    whose header this rank has sent."""

    known: dict[int, TensorShape] = field(default_factory=dict)
    announced: set[int] = field(default_factory=set)


def header(tensor: torch.Tensor) -> torch.Tensor:
    """The header announcing ``tensor``'s dtype and shape (int64, :data:`HEADER_LENGTH`)."""
    if tensor.dim() > HEADER_LENGTH - 2:
        raise ExecutorError(f"stage outputs may have at most {HEADER_LENGTH - 2} dimensions")
    if tensor.dtype not in DTYPES:
        raise ExecutorError(f"stage outputs of dtype {tensor.dtype} cannot cross ranks")
    sizes = list(tensor.shape) + [0] * (HEADER_LENGTH - 2 - tensor.dim())
    return torch.tensor([DTYPES.index(tensor.dtype), tensor.dim(), *sizes], dtype=torch.int64)


def from_header(values: torch.Tensor) -> TensorShape:
    """The (shape, dtype) a :func:`header` announced."""
    numbers = [int(v) for v in values.tolist()]
    return tuple(numbers[2 : 2 + numbers[1]]), DTYPES[numbers[0]]
