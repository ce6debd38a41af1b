"""The KV pool: only its resident part is touched at load, the rest as blocks
are handed out; budget and resident size are chosen per device."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from flexserv_transformers.engine.engine import PagedEngine
from flexserv_transformers.engine.kv_cache import PagedKVCache
from flexserv_transformers.engine.settings import CPU_KV_CACHE_MIB, CPU_KV_RESIDENT_MIB, EngineSettings
from transformers import LlamaConfig, LlamaForCausalLM

MiB = 2**20

# A pool of 1024 blocks of 16 KiB per layer and tensor (128 MiB in all), 256 of them
# pre-touched; then 256 more handed out (zero-filled by clear_blocks).
_MEASURE = """
import psutil, torch
from flexserv_transformers.engine.kv_cache import PagedKVCache
process = psutil.Process()
before = process.memory_info().rss
cache = PagedKVCache(
    num_layers=4, num_blocks=1024, block_size=16, kv_heads=4, head_dim=64, dtype=torch.float32, device="cpu",
    resident_blocks=RESIDENT,
)
at_load = process.memory_info().rss - before
cache.clear_blocks(torch.arange(256, 512))
handed_out = process.memory_info().rss - before
print(at_load, handed_out, int(cache.keys[0][:512].any()) + int(cache.values[3][:512].any()))
"""
SIZE = 2 * 4 * 1024 * 16 * 4 * 64 * 4


def _measure(resident: str) -> tuple[int, int, int]:
    # Measured in a fresh interpreter: in the test process, memory freed by earlier
    # tests can be handed back to the pool without the RSS growing (seen here).
    script = _MEASURE.replace("RESIDENT", resident)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    at_load, handed_out, nonzero = (int(v) for v in out.stdout.split())
    return at_load, handed_out, nonzero


@pytest.mark.slow  # two fresh interpreters importing torch
def test_only_the_resident_part_of_the_pool_is_touched_at_load() -> None:
    at_load, handed_out, nonzero = _measure("256")
    quarter = SIZE // 4
    assert 0.9 * quarter <= at_load <= 1.3 * quarter, f"RSS grew {at_load / MiB:.1f} MiB at load, not ~32 MiB"
    assert handed_out - at_load >= 0.9 * quarter  # handing out 256 more blocks wrote them
    assert handed_out <= 0.7 * SIZE  # and nothing beyond them
    assert not nonzero  # pre-touched and handed-out blocks read zero: masked padding never reads NaN
    at_load, _, nonzero = _measure("None")  # the default: all of it, as on a GPU
    assert at_load >= 0.9 * SIZE, f"RSS grew {at_load / MiB:.1f} MiB for a {SIZE / MiB:.0f} MiB pool"
    assert not nonzero


def _tiny_llama(*, hidden_size: int) -> LlamaForCausalLM:
    """A random 2-layer transformers Llama with 4 heads over 2 KV heads (its KV geometry is what counts)."""
    config = LlamaConfig(
        vocab_size=64, hidden_size=hidden_size, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


def test_the_automatic_budget_on_cpu() -> None:
    model = _tiny_llama(hidden_size=32)  # 2 layers, 2 KV heads of 8 dims
    per_block = PagedKVCache.bytes_per_block(num_layers=2, block_size=16, kv_heads=2, head_dim=8, dtype=torch.float32)
    # A long context: the device's budget bounds the pool.
    engine = PagedEngine(model, settings=EngineSettings(), context_length=1 << 20)
    try:
        assert engine.stats()["kv_cache"]["total_blocks"] == int(CPU_KV_CACHE_MIB * MiB // per_block)
    finally:
        engine.close()
    # A short one: a full batch of full-context sequences (32 x 64 tokens) is all it can use.
    engine = PagedEngine(model, settings=EngineSettings(transformers_max_batch_size=32))
    try:
        assert engine.stats()["kv_cache"]["total_blocks"] == 32 * 64 // 16
    finally:
        engine.close()
    engine = PagedEngine(model, settings=EngineSettings(transformers_kv_cache_memory=1))
    try:
        assert engine.stats()["kv_cache"]["total_blocks"] == MiB // per_block
    finally:
        engine.close()


def test_the_resident_size_on_cpu_is_automatic_settable_and_within_the_budget() -> None:
    model = _tiny_llama(hidden_size=64)  # 2 layers, 2 KV heads of 16 dims
    per_block = PagedKVCache.bytes_per_block(num_layers=2, block_size=16, kv_heads=2, head_dim=16, dtype=torch.float32)
    cases = [
        (EngineSettings(), int(CPU_KV_RESIDENT_MIB * MiB // per_block)),
        (EngineSettings(transformers_kv_cache_resident=1), MiB // per_block),
        (EngineSettings(transformers_kv_cache_resident=10_000), int(CPU_KV_CACHE_MIB * MiB // per_block)),
        (EngineSettings(transformers_kv_cache_blocks=100, transformers_kv_cache_resident=0.001), 1),
    ]
    for settings, resident in cases:
        engine = PagedEngine(model, settings=settings, context_length=1 << 20)
        try:
            kv = engine.stats()["kv_cache"]
            assert (kv["resident_blocks"], kv["touched_blocks"]) == (resident, resident)
            assert engine.runner.cache.resident_blocks == resident
        finally:
            engine.close()


async def test_decode_steps_run_on_one_intra_op_thread_and_wide_prefills_on_all() -> None:
    from flexserv_torch import full_intra_op_threads

    from flexserv_core import SamplingParams

    model = _tiny_llama(hidden_size=64)
    engine = PagedEngine(model, settings=EngineSettings(transformers_single_thread_step_tokens=16))
    try:
        params = SamplingParams(max_tokens=4, temperature=0)
        assert len([t async for t in engine.generate(list(range(1, 41)), params)]) == 4
        # the 40-token prefill ran on all threads, the decodes after it on one
        assert engine.stats()["intra_op_threads"] == 1
        long = SamplingParams(max_tokens=1, temperature=0)
        assert len([t async for t in engine.generate(list(range(2, 42)), long)]) == 1
        assert engine.stats()["intra_op_threads"] == full_intra_op_threads()
    finally:
        engine.close()
