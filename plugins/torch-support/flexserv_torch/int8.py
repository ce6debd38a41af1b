"""int8 matrix products for float32 CPUs, on fbgemm's x86 kernels.

On a CPU without fast bf16 (AVX2-only x86) a model's ``nn.Linear`` layers run in
float32: every decode step streams 4 bytes per weight. Here each weight is stored
as int8 with one float scale per output row (symmetric, per channel) and prepacked
for fbgemm, whose AVX2 and VNNI kernels multiply uint8 activations by int8 weights
with int32 sums. One byte per weight, and integer products instead of float ones.

Where the 8 bits go: fbgemm's AVX2 kernel adds pairs of uint8 x int8 products in
int16 (``vpmaddubsw``), which saturates when both pairs are near full scale.
torch's ``quantize_dynamic`` avoids that with 7-bit activations (``reduce_range``);
these layers keep the activations' 8 bits and take the bit from the weights
(``WEIGHT_MAX`` = 63), whose scale is per output row and so loses less: a pair of
products is at most 2 x 255 x 64 = 32640 < 32767, and AVX2 and VNNI compute the
same integers.

:func:`pack_weight` is that weight format. :class:`RowInt8Linear` quantizes each
input row with its own scale (its largest magnitude maps to 127.5 around a zero
point of 128), so a row's output depends on that row alone: the integer sums are
exact, and the float steps around them are per element. A row computes the same
numbers in a batch of one as in a batch of many, which a batching engine needs for
output that does not depend on the load (and speculative decoding for verifying a
draft as extra rows). fbgemm's own dynamic quantization uses one scale for the
whole input instead (the sentence-transformers plugin's choice, where a forward is
one request's batch).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["WEIGHT_MAX", "RowInt8Linear", "fbgemm_available", "pack_weight", "quantize_linears"]

#: Weights are rounded to [-WEIGHT_MAX, WEIGHT_MAX] (7 bits; see the module docstring).
WEIGHT_MAX = 63
#: An input row is scaled so that its largest magnitude maps to this many steps around
#: the uint8 zero point: [-127.5, 127.5] -> [0.5, 255.5], rounded into [0, 255].
_INPUT_STEPS = 127.5
_INPUT_ZERO_POINT = 128


@functools.cache
def fbgemm_available() -> bool:
    """Whether torch has the x86 int8 kernels (fbgemm) these layers run on."""
    return "fbgemm" in torch.backends.quantized.supported_engines


def pack_weight(weight: torch.Tensor, bias: torch.Tensor | None = None) -> Any:
    """``weight`` (``[out, in]``) as fbgemm's prepacked int8 matrix, one scale per output row."""
    if not fbgemm_available():
        raise RuntimeError("this torch has no fbgemm int8 kernels (x86 only)")
    weight = weight.detach().float()
    scale = (weight.abs().amax(dim=1).clamp(min=1e-8) / WEIGHT_MAX).double()
    zero = torch.zeros(weight.shape[0], dtype=torch.long)
    with warnings.catch_warnings():
        # torch marks its quantized-tensor API deprecated (in favour of torchao); the
        # kernels are the ones quantize_dynamic still uses.
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=UserWarning)
        qweight = torch.quantize_per_channel(weight, scale, zero, 0, torch.qint8)
        return torch.ops.quantized.linear_prepack(qweight, bias)


class RowInt8Linear(nn.Module):
    """``nn.Linear`` in int8: weights per output row (:func:`pack_weight`), each input
    row quantized with its own scale; float32 in and out."""

    bias: torch.Tensor | None

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self._packed = pack_weight(linear.weight)
        # added after the rows are scaled back: it cannot ride in the packed matrix
        self.register_buffer("bias", linear.bias.detach().float() if linear.bias is not None else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, shape[-1])
        if rows.dtype != torch.float32:
            rows = rows.float()
        scale = rows.abs().amax(dim=1, keepdim=True).clamp(min=1e-30)
        out: torch.Tensor = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
            rows / scale, 1.0 / _INPUT_STEPS, _INPUT_ZERO_POINT, self._packed
        )
        out = out * scale
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 rows"


def quantize_linears(model: nn.Module, make: Callable[[nn.Linear], nn.Module] = RowInt8Linear) -> int:
    """Replace every ``nn.Linear`` of ``model`` (an output head included; a tied one
    gets its own int8 copy, the input embedding keeps its weights) by ``make(linear)``;
    the number replaced."""
    targets = [(name, module) for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, make(linear))
    return len(targets)
