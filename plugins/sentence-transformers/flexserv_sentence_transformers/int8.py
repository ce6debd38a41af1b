"""Dynamic int8 for float32 CPUs (``--sentence-transformers-quantization``).

On a CPU without fast bf16 (AVX2-only x86) an encoder's forward is its ``nn.Linear``
layers in float32. Dynamic quantization runs them as int8 matrix products instead:
each weight is stored as int8 with one float scale per output row (symmetric, per
channel), and each call quantizes its float32 input to uint8 with one scale and zero
point for the whole input, multiplies in int8 with fbgemm's kernels (the ones
``torch.ao.quantization.quantize_dynamic`` uses) and returns float32. Everything
else (embeddings, LayerNorm, attention's softmax, pooling) stays float32.

Where the 8 bits go: fbgemm's AVX2 kernel adds pairs of uint8 x int8 products in
int16 (``vpmaddubsw``), which saturates when both pairs are near full scale. torch's
``quantize_dynamic`` avoids that by quantizing the activations to 7 bits
(``reduce_range``). On all-MiniLM-L6-v2 that costs the vectors much of their
accuracy (cosine to float32 as low as 0.86, mean 0.973; ``docs/benchmarks.md``),
because an activation's one scale must cover its outlier channels. This module
keeps the activations' 8 bits and takes the bit from the weights instead: their
scale is per output row, so 7 bits cost far less (as low as 0.957 for a two-word
input, >= 0.987 for longer ones, mean 0.991), and a pair of products is at most
2 x 255 x 64 = 32640 < 32767, so nothing saturates on any x86 kernel: AVX2 and VNNI
compute the same integer sums.

The activation scale covers a whole forward batch, so an input's vector depends
slightly on the inputs batched with it (within the same bounds).
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch import nn

__all__ = ["DynamicInt8Linear", "int8_supported", "quantize_linears"]

#: Weights are rounded to [-WEIGHT_MAX, WEIGHT_MAX] (7 bits; see the module's docstring).
WEIGHT_MAX = 63


@functools.cache
def int8_supported() -> bool:
    """Whether torch has the x86 int8 kernels (fbgemm) this module runs on."""
    return "fbgemm" in torch.backends.quantized.supported_engines


class DynamicInt8Linear(nn.Module):
    """``nn.Linear`` with int8 weights (per output row) and activations quantized per call."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        weight = linear.weight.detach().float()
        scale = (weight.abs().amax(dim=1).clamp(min=1e-8) / WEIGHT_MAX).double()
        zero = torch.zeros(weight.shape[0], dtype=torch.long)
        bias = linear.bias.detach().float().contiguous() if linear.bias is not None else None
        with warnings.catch_warnings():
            # torch marks its quantized-tensor API deprecated (in favour of torchao); the
            # kernels are the ones quantize_dynamic still uses.
            warnings.simplefilter("ignore", category=DeprecationWarning)
            warnings.simplefilter("ignore", category=UserWarning)
            qweight = torch.quantize_per_channel(weight, scale, zero, 0, torch.qint8)
            self._packed = torch.ops.quantized.linear_prepack(qweight, bias)

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
    if not int8_supported():
        raise RuntimeError("this torch has no fbgemm int8 kernels (x86 only)")
    targets = [(name, module) for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, DynamicInt8Linear(linear))
    return len(targets)
