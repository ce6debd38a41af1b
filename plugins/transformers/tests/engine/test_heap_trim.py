"""The engine's idle heap trim: rate-limited, and a real ``malloc_trim`` on glibc."""

from __future__ import annotations

import platform

import pytest
from flexserv_transformers.engine.heap import HeapTrimmer

from flexserv_core import SamplingParams


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trims_at_most_once_per_interval() -> None:
    clock = Clock()
    heap = HeapTrimmer(min_interval=10.0, clock=clock)
    assert heap.available
    heap.idle()
    assert heap.trims == 1  # the first idle moment trims
    clock.now += 9.9
    heap.idle()
    assert heap.trims == 1
    clock.now += 0.2
    heap.idle()
    heap.idle()
    assert heap.trims == 2


def test_without_malloc_trim_it_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from flexserv_transformers.engine import heap as module

    monkeypatch.setattr(module, "_load_malloc_trim", lambda: None)
    trimmer = module.HeapTrimmer(min_interval=0.0)
    trimmer.idle()
    assert not trimmer.available and trimmer.trims == 0


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
async def test_the_engine_trims_when_it_goes_idle() -> None:
    import asyncio

    from flexserv_transformers.engine.engine import PagedEngine
    from flexserv_transformers.engine.settings import EngineSettings
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    engine = PagedEngine(LlamaForCausalLM(config).eval(), settings=EngineSettings(), eos_token_ids=set())
    try:
        engine.heap = HeapTrimmer(min_interval=0.0)  # every idle moment, for the test
        tokens = [t async for t in engine.generate([1, 2, 3], SamplingParams(max_tokens=4, temperature=0))]
        assert len(tokens) == 4
        for _ in range(200):  # the engine thread goes back to waiting right after the last token
            if engine.heap.trims:
                break
            await asyncio.sleep(0.01)
        assert engine.heap.trims >= 1
    finally:
        engine.close()
