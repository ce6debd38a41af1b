"""The KV pool is resident from the start and sized automatically per device."""

from __future__ import annotations

import subprocess
import sys

import torch
from flexserv_transformers.engine.engine import PagedEngine
from flexserv_transformers.engine.kv_cache import PagedKVCache
from flexserv_transformers.engine.settings import CPU_KV_CACHE_MIB, EngineSettings
from transformers import LlamaConfig, LlamaForCausalLM

MiB = 2**20


_MEASURE = """
import psutil, torch
from flexserv_transformers.engine.kv_cache import PagedKVCache
process = psutil.Process()
before = process.memory_info().rss
cache = PagedKVCache(
    num_layers=4, num_blocks=1024, block_size=16, kv_heads=4, head_dim=64, dtype=torch.float32, device="cpu"
)
print(process.memory_info().rss - before, int(cache.keys[0].any()))
"""


def test_the_pool_is_touched_when_allocated():
    # Measured in a fresh interpreter: in the test process, memory freed by earlier
    # tests can be handed back to the pool without the RSS growing (seen here).
    out = subprocess.run([sys.executable, "-c", _MEASURE], capture_output=True, text=True, check=True, timeout=120)
    grown, any_nonzero = (int(v) for v in out.stdout.split())
    size = 2 * 4 * 1024 * 16 * 4 * 64 * 4
    assert grown >= 0.9 * size, f"RSS grew {grown / MiB:.1f} MiB for a {size / MiB:.0f} MiB pool"
    assert not any_nonzero  # zero-filled: masked padding never reads NaN


def test_the_automatic_budget_on_cpu():
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
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
