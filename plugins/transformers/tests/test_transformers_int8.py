"""int8 layers (``--transformers-quantization int8``: weight-only in bf16, rows in float32) and where they are allowed."""

from __future__ import annotations

import pytest

from flexserv_core import UsageError


def test_int8_layer_matches_its_dequantized_weights():
    import torch
    from flexserv_transformers.int8 import Int8Linear

    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 40, bias=True)
    q = Int8Linear(linear, torch.bfloat16)
    assert q.qweight.dtype is torch.int8 and q.weight.shape == (40, 96)
    x = torch.randn(3, 5, 96)
    dequant = q.qweight.float() * q.scale.float()[:, None]
    expected = x.bfloat16().float() @ dequant.T + linear.bias.detach()
    got = q(x.bfloat16())
    assert got.shape == (3, 5, 40) and got.dtype is torch.bfloat16
    torch.testing.assert_close(got.float(), expected, atol=0.05, rtol=0.02)
    # ... and stays close to the float layer (per-row int8 loses < 1% of each row's range).
    torch.testing.assert_close(got.float(), linear(x).detach(), atol=0.08, rtol=0.05)


def test_quantize_linears_replaces_every_linear_and_keeps_the_model_close(tmp_path):
    import torch
    from flexserv_transformers.int8 import Int8Linear, quantize_linears
    from flexserv_transformers.testing import build_tiny_llama
    from transformers import AutoModelForCausalLM

    path = build_tiny_llama(tmp_path / "tiny", max_position_embeddings=64)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    ids = torch.tensor([[5, 17, 42, 99, 7, 8, 300, 12]])
    with torch.inference_mode():
        before = model(ids).logits.float()
    replaced = quantize_linears(model, torch.bfloat16)
    assert replaced == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer, and the output head
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert isinstance(model.get_output_embeddings(), Int8Linear)
    assert model.get_input_embeddings().weight.dtype is torch.bfloat16
    with torch.inference_mode():
        after = model(ids).logits.float()
    # Same argmax at most positions, and logits within a few percent of their spread.
    agree = (before.argmax(-1) == after.argmax(-1)).float().mean().item()
    assert agree >= 0.75
    assert (after - before).abs().max().item() < 0.1 * (before.max() - before.min()).item()


def test_in_float32_every_linear_becomes_a_row_int8_layer(tmp_path):
    import torch
    from flexserv_torch import RowInt8Linear
    from flexserv_transformers.int8 import quantize_linears
    from flexserv_transformers.testing import build_tiny_llama
    from transformers import AutoModelForCausalLM

    path = build_tiny_llama(tmp_path / "tiny", max_position_embeddings=64)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.tensor([[5, 17, 42, 99, 7, 8, 300, 12]])
    with torch.inference_mode():
        before = model(ids).logits
    assert quantize_linears(model, torch.float32) == 2 * 7 + 1
    assert all(type(m) is not torch.nn.Linear for m in model.modules())
    assert isinstance(model.get_output_embeddings(), RowInt8Linear)
    with torch.inference_mode():
        after = model(ids).logits
    assert after.dtype is torch.float32
    assert (before.argmax(-1) == after.argmax(-1)).float().mean().item() >= 0.75
    assert (after - before).abs().max().item() < 0.1 * (before.max() - before.min()).item()


def test_int8_runs_on_cpu_in_bfloat16_or_float32():
    import torch
    from flexserv_transformers.settings import check_quantization

    with pytest.raises(UsageError, match="runs on CPU"):
        check_quantization("int8", torch.device("cuda"), torch.bfloat16)
    with pytest.raises(UsageError, match="bfloat16 or float32"):
        check_quantization("int8", torch.device("cpu"), torch.float16)
    check_quantization("int8", torch.device("cpu"), torch.bfloat16)
    check_quantization("int8", torch.device("cpu"), torch.float32)  # fbgemm: every x86 torch build has it
