"""An AmoebaNet-D(L, D) approximation, as GPipe and torchgpipe's benchmark build it.

Layout (kakaobrain/torchgpipe, benchmarks/models/amoebanet), 224x224 input, L a multiple of 3:
a stride-2 3x3 stem conv to D/4 channels at 112x112; two reduction cells (widths D/2 and D) down
to 28x28; then three stacks of L/3 normal cells at widths D, 2D, 4D and resolutions 28, 14, 7,
with a reduction cell before the second and third stacks; average pooling and a 1000-way
classifier.

Parameters per cell at width c (counted from torchgpipe's genotype): a steady normal cell has
13.75c^2 weights, the first normal cell after a reduction 10.75c^2 (10.25c^2 in the first stack),
the second 12.75c^2; a reduction cell about 7.5c^2 (fitted so the totals match torchgpipe's
81.5M, 319.0M, 542.7M, 1.06B and 1.84B parameters for GPipe Table 1's five models within 1%).
Forward multiply-adds of a conv cell are its weights times its output's height x width. A normal
cell outputs 4c channels, a reduction cell 3c; a cell passes on its output and its predecessor's
(so a pipeline boundary carries both). Activations stashed per cell are modelled as twice the
cell's output in fp32: an assumption for fused (XLA-style) kernels, discussed in the GPipe
reproduction.
"""

from __future__ import annotations

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.workload.model import Layer, Model

FP32 = 4
STASH_PER_OUTPUT = 2.0


def _cell(name: str, weights: float, out_channels: float, side: int, previous_out: float) -> Layer:
    area = side * side
    macs = weights * area
    output = out_channels * area * FP32
    return Layer(
        name,
        forward_flops=2 * macs,
        input_grad_flops=2 * macs,
        weight_grad_flops=2 * macs,
        parameters=weights,
        activation_bytes=STASH_PER_OUTPUT * output,
        weight_grad_activation_bytes=output,
        output_bytes=output + previous_out,
    )


def amoebanet_d(layers: int, filters: int, batch: int = 128) -> Model:
    """AmoebaNet-D(L=layers, D=filters): L normal cells in three stacks, D base filters."""
    checks.positive_int("AmoebaNet layers", layers)
    d = checks.positive_int("AmoebaNet filters", filters)
    if layers % 3:
        raise SpecError(f"AmoebaNet layers must be a multiple of 3, got {layers}")
    cells: list[Layer] = []
    stem_out = d / 4 * 112 * 112 * FP32
    cells.append(
        Layer(
            "stem",
            forward_flops=2 * 27 * d / 4 * 112 * 112,
            input_grad_flops=0.0,
            weight_grad_flops=2 * 27 * d / 4 * 112 * 112,
            parameters=27 * d / 4,
            activation_bytes=3 * 224 * 224 * FP32 + stem_out,
            weight_grad_activation_bytes=3 * 224 * 224 * FP32,
            output_bytes=stem_out,
        )
    )
    previous = stem_out
    for name, width, side in (("reduce-stem-a", d / 2, 56), ("reduce-stem-b", d, 28)):
        cells.append(_cell(name, 7.5 * width * width, 3 * width, side, previous))
        previous = 3 * width * side * side * FP32
    per_stack = layers // 3
    for stack, (width, side) in enumerate(((d, 28), (2 * d, 14), (4 * d, 7))):
        if stack:
            cells.append(_cell(f"reduce-{stack}", 7.5 * width * width, 3 * width, side, previous))
            previous = 3 * width * side * side * FP32
        for index in range(per_stack):
            first = 10.25 if stack == 0 else 10.75
            factor = first if index == 0 else 12.75 if index == 1 else 13.75
            cells.append(
                _cell(f"normal-{stack}-{index}", factor * width * width, 4 * width, side, previous)
            )
            previous = 4 * width * side * side * FP32
    classifier_in = 16 * d
    cells.append(
        Layer(
            "classifier",
            forward_flops=2 * classifier_in * 1000,
            input_grad_flops=2 * classifier_in * 1000,
            weight_grad_flops=2 * classifier_in * 1000,
            parameters=classifier_in * 1000 + 1000,
            activation_bytes=(classifier_in * 49 + 1000) * FP32,
            weight_grad_activation_bytes=classifier_in * FP32,
            output_bytes=FP32,
        )
    )
    return Model(
        f"amoebanet-d-{layers}-{filters}",
        tuple(cells),
        input_bytes=3 * 224 * 224 * FP32,
        dtype="bf16",
        weight_bytes_per_parameter=4,
        gradient_bytes_per_parameter=4,
        optimizer_bytes_per_parameter=4,
        default_batch=batch,
        description=f"AmoebaNet-D({layers}, {filters}), 224x224 input (GPipe, torchgpipe)",
        optimizer_temporary_bytes_per_parameter=4,  # RMSProp's square root, in its step
    )
