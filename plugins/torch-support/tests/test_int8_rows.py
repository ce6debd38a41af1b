"""int8 rows on fbgemm (``flexserv_torch.RowInt8Linear``): close to the float layer,
and a row's output the same bit for bit whatever else is in its batch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from flexserv_torch import RowInt8Linear, fbgemm_available

pytestmark = pytest.mark.skipif(not fbgemm_available(), reason="fbgemm: x86 torch builds")


def _layer(inputs: int = 96, outputs: int = 40, bias: bool = True) -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(inputs, outputs, bias=bias)


def test_a_rows_output_does_not_depend_on_its_batch() -> None:
    layer = RowInt8Linear(_layer(576, 300))
    torch.manual_seed(1)
    x = torch.randn(33, 576) * torch.logspace(-2, 1, 33)[:, None]  # rows of very different scales
    together = layer(x)
    alone = torch.cat([layer(x[i : i + 1]) for i in range(len(x))])
    assert torch.equal(together, alone)
    # and in a batch with a row of huge values, which a scale for the whole input would let dominate
    mixed = layer(torch.cat([x[:5], torch.full((1, 576), 1e4)]))[:5]
    assert torch.equal(mixed, together[:5])


def test_close_to_the_float_layer_with_its_bias_and_shape() -> None:
    linear = _layer()
    layer = RowInt8Linear(linear)
    x = torch.randn(3, 5, 96)
    got = layer(x)
    want = linear(x).detach()
    assert got.shape == (3, 5, 40) and got.dtype is torch.float32
    # 7-bit weights per output row, 8-bit inputs per row: ~1-2% of the output's size
    assert ((got - want).norm() / want.norm()).item() < 0.03
    assert layer.bias is not None
    no_bias = RowInt8Linear(_layer(bias=False))
    assert no_bias.bias is None and no_bias(x).shape == (3, 5, 40)


_SATURATION_CHECK = """
import torch
from flexserv_torch import RowInt8Linear, pack_weight
weight = torch.ones(4, 512)
layer = RowInt8Linear(torch.nn.Linear(512, 4, bias=False))
layer._packed = pack_weight(weight)
x = torch.ones(2, 512)
torch.testing.assert_close(layer(x), x @ weight.T, rtol=0.01, atol=0.0)
"""


def test_the_weights_take_seven_bits_so_fbgemms_avx2_kernel_cannot_saturate() -> None:
    # Full-scale inputs against full-scale weights of one sign: the int16 pair sums of
    # fbgemm's AVX2 kernel are at their largest (8-bit weights saturate here; VNNI
    # kernels would not show it, so the check runs on the AVX2 kernel on every x86 CPU).
    env = {**os.environ, "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"}
    done = subprocess.run(
        [sys.executable, "-c", _SATURATION_CHECK], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
