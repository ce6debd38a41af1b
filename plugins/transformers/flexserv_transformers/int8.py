"""int8 for CPU decoding (``--transformers-quantization int8``).

In bfloat16 (CPUs with fast bf16, opt-in), weight-only:

A batch-1 decode step is a chain of matrix-vector products: its time is the time
to stream every weight from memory once. Storing each ``nn.Linear`` weight as
int8 with one bf16 scale per output row halves the bytes per step against bf16,
and torch's own CPU kernel for it (``aten._weight_int8pack_mm``, the one PyTorch's
int8 weight-only recipes use) multiplies a bf16 activation by them directly.
Activations stay bf16, so only the weights are rounded (symmetric, per output
channel). Greedy output is close to, but not identical to, the bf16 model's;
``docs/benchmarks.md`` records the agreement measured on the embedded model.

In float32 (AVX2-only CPUs), int8 weights *and* activations on fbgemm's kernels
(:class:`flexserv_torch.RowInt8Linear`): each activation row is quantized with its
own scale, so a row's result in these layers does not depend on the rows batched
with it; the paged engine then lays its attention out batch-invariant, so that a
speculative draft's rows are computed exactly as plain decoding computes them
(``engine/runner.py``).
"""

from __future__ import annotations

import torch
from flexserv_torch import quantize_linears as replace_linears
from torch import nn

__all__ = ["Int8Linear", "quantize_linears"]


class Int8Linear(nn.Module):
    """``y = x @ (q * scale).T + bias`` with ``q`` int8 ``[out, in]`` and ``scale`` ``[out]``."""

    qweight: torch.Tensor
    scale: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, linear: nn.Linear, compute_dtype: torch.dtype) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp(min=1e-8) / 127.0
        q = torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8)
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.compute_dtype = compute_dtype
        self.register_buffer("qweight", q.contiguous())
        self.register_buffer("scale", scale.to(compute_dtype))
        bias = linear.bias.detach().to(compute_dtype) if linear.bias is not None else None
        self.register_buffer("bias", bias)

    @property
    def weight(self) -> torch.Tensor:
        """The int8 matrix (``[out, in]``, as ``nn.Linear.weight``): code that reads shapes keeps working."""
        return self.qweight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        if flat.dtype != self.compute_dtype:
            flat = flat.to(self.compute_dtype)
        out: torch.Tensor = torch.ops.aten._weight_int8pack_mm(flat, self.qweight, self.scale)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weight-only"


def quantize_linears(model: nn.Module, compute_dtype: torch.dtype = torch.bfloat16) -> int:
    """Replace every ``nn.Linear`` of ``model`` (the output head included) by
    :class:`Int8Linear`, or in float32 by :class:`flexserv_torch.RowInt8Linear`.

    A tied output head gets its own int8 copy; the input embedding keeps its
    weights. Returns the number of layers replaced.
    """
    if compute_dtype is torch.float32:
        return replace_linears(model)
    return replace_linears(model, lambda linear: Int8Linear(linear, compute_dtype))
