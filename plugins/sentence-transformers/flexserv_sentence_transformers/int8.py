"""Dynamic int8 for float32 CPUs (``--sentence-transformers-quantization``).

On a CPU without fast bf16 (AVX2-only x86) an encoder's forward is its ``nn.Linear``
layers in float32. Dynamic quantization runs them as int8 matrix products instead:
each weight is stored as int8 with one float scale per output row (symmetric, per
channel), and each call quantizes its float32 input to uint8 with one scale and zero
point for the whole input, multiplies in int8 with fbgemm's kernels (the ones
``torch.ao.quantization.quantize_dynamic`` uses) and returns float32. Everything
else (embeddings, LayerNorm, attention's softmax, pooling) stays float32.

Where the 8 bits go (:mod:`flexserv_torch.int8`, whose weight format this is):
fbgemm's AVX2 kernel adds pairs of uint8 x int8 products in int16, which saturates
when both are near full scale. torch's ``quantize_dynamic`` quantizes the
activations to 7 bits instead; on all-MiniLM-L6-v2 that costs the vectors much of
their accuracy (cosine to float32 as low as 0.86, mean 0.973; ``docs/benchmarks.md``),
because an activation's one scale must cover its outlier channels. With 7-bit
weights per output row and 8-bit activations the cosine is as low as 0.957 for a
two-word input, >= 0.987 for longer ones, mean 0.991.

The activation scale covers a whole forward batch, so an input's vector depends
slightly on the inputs batched with it (within the same bounds).
"""

from __future__ import annotations

import torch
from flexserv_torch import fbgemm_available, pack_weight
from flexserv_torch import quantize_linears as replace_linears
from torch import nn

__all__ = ["DynamicInt8Linear", "int8_supported", "quantize_linears"]


def int8_supported() -> bool:
    """Whether torch has the x86 int8 kernels (fbgemm) this module runs on."""
    return fbgemm_available()


class DynamicInt8Linear(nn.Module):
    """``nn.Linear`` with int8 weights (per output row, :func:`flexserv_torch.pack_weight`)
    and activations quantized per call, one scale for the whole input."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        bias = linear.bias.detach().float().contiguous() if linear.bias is not None else None
        self._packed = pack_weight(linear.weight, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            x = x.float()
        # reduce_range=False: the activations keep 8 bits (the weights gave one up).
        out: torch.Tensor = torch.ops.quantized.linear_dynamic(x, self._packed, False)
        return out

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, dynamic int8"


def quantize_linears(model: nn.Module) -> int:
    """Replace every ``nn.Linear`` of ``model`` by :class:`DynamicInt8Linear`; the number replaced."""
    return replace_linears(model, DynamicInt8Linear)
