"""What the paged engine cannot serve is refused at load, and a failure that will
repeat is not answered with "retry the request".

A tiny random Llama whose attention layers are made to pass an argument the paged
attention does not implement stands for a future transformers release; Falcon, whose
attention does not go through transformers' attention interface, for a real one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from flexserv_transformers.engine.engine import PagedEngine
from flexserv_transformers.engine.settings import EngineSettings

from flexserv_core import ModelKind, ModelLoadError, ModelSpec, SamplingParams, ServiceUnavailable

pytestmark = pytest.mark.slow  # builds and runs tiny real models


@pytest.fixture
def tiny(tmp_path: Path) -> tuple[Any, Any]:
    from flexserv_transformers.testing import build_tiny_llama
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = build_tiny_llama(tmp_path / "tiny", max_position_embeddings=128, seed=5)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(path)


def engine_for(model: Any, name: str = "tiny") -> PagedEngine:
    return PagedEngine(model, settings=EngineSettings(transformers_kv_block_size=4), eos_token_ids=(), name=name)


def pass_an_argument(model: Any, **extra: Any) -> list[Any]:
    """Make every attention layer hand ``extra`` to the attention function, as a
    transformers release adding an argument would; returns the hook handles."""

    def hook(module: Any, args: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        return args, {**kwargs, **extra}

    return [layer.self_attn.register_forward_pre_hook(hook, with_kwargs=True) for layer in model.model.layers]


async def greedy(engine: PagedEngine, n: int = 4) -> list[int]:
    params = SamplingParams(max_tokens=n, temperature=0)
    return [t.token_id async for t in engine.generate([1, 2, 3, 4, 5], params)]


def test_an_argument_the_attention_does_not_implement_refuses_the_model_at_load(tiny: tuple[Any, Any]) -> None:
    model, _tok = tiny
    pass_an_argument(model, attention_chunk_size=4)
    with pytest.raises(ModelLoadError) as refused:
        engine_for(model, name="future")
    message = refused.value.message
    assert "Model 'future'" in message and "LlamaForCausalLM" in message
    assert "attention_chunk_size" in message and "--transformers-engine simple" in message


def test_a_bidirectional_attention_is_refused_at_load(tiny: tuple[Any, Any]) -> None:
    """Embedding-style checkpoints (Gemma 3 with ``use_bidirectional_attention``) mark
    their attention modules non-causal; the paged attention is causal only."""
    model, _tok = tiny
    for layer in model.model.layers:
        layer.self_attn.is_causal = False
    with pytest.raises(ModelLoadError) as refused:
        engine_for(model)
    assert "bidirectional" in refused.value.message


async def test_an_argument_met_while_serving_stops_the_engine_without_inviting_a_retry(tiny: tuple[Any, Any]) -> None:
    model, _tok = tiny
    engine = engine_for(model)
    try:
        assert len(await greedy(engine)) == 4
        pass_an_argument(model, attention_chunk_size=4)
        with pytest.raises(ServiceUnavailable) as failed:
            await greedy(engine)
        assert "attention_chunk_size" in failed.value.message and "retry" not in failed.value.message
        assert engine.failure is not None and "attention_chunk_size" in engine.failure
        assert engine.restarts == 0  # no restart: it would fail the same way
    finally:
        engine.close()


async def test_a_failure_seen_before_is_not_answered_with_retry(tiny: tuple[Any, Any]) -> None:
    model, _tok = tiny
    engine = engine_for(model)

    def broken(plan: Any) -> Any:
        raise RuntimeError("shape mismatch in layer 3 (injected)")

    try:
        engine.runner.forward = broken  # type: ignore[method-assign]
        codes = []
        for _ in range(2):
            with pytest.raises(ServiceUnavailable) as failed:
                await greedy(engine)
            codes.append((failed.value.code, "retry the request" in failed.value.message))
        assert codes == [("engine_restarted", True), ("engine_failed", False)]
    finally:
        engine.close()


async def test_falcon_is_refused_by_the_paged_engine_and_served_by_the_simple_one(
    tmp_path: Path, load_model: Any, flexserv_test_cache: Path
) -> None:
    """Through the backend, as ``flexserv run`` loads it."""
    from flexserv_transformers.testing import build_tiny_family

    model, tok = build_tiny_family("Falcon", seed=2, path=tmp_path / "falcon")
    spec = ModelSpec(name="falcon", kind=ModelKind.TEXT, source=str(tmp_path / "falcon"))
    with pytest.raises(ModelLoadError) as refused:
        load_model(spec, flexserv_test_cache, dtype="float32")
    message = refused.value.message
    assert "Model 'falcon'" in message and "FalconForCausalLM" in message
    assert "not supporting custom attention backends" in message and "--transformers-engine simple" in message

    served = load_model(spec, flexserv_test_cache, dtype="float32", transformers_engine="simple")
    try:
        prompt = list(tok("hello there, the quick brown fox")["input_ids"])
        deltas = [d async for d in served.generate(prompt, SamplingParams(max_tokens=6, temperature=0))]
        with torch.inference_mode():
            expected = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=6)[0, len(prompt) :]
        assert [d.token_id for d in deltas] == expected.tolist()
    finally:
        await asyncio.to_thread(served.unload)


def test_a_refused_architecture_reaches_the_client_as_a_load_error_naming_the_fix(tmp_path: Path) -> None:
    """A real server and the openai client: the paged engine's refusal is a 503
    ``model_load_failed`` that says what to do; with the simple engine it serves."""
    import openai
    from flexserv_transformers.testing import build_tiny_family

    from flexserv_core.testing import ServedApp, make_app

    build_tiny_family("StableLM", seed=2, path=tmp_path / "stablelm")
    settings = {"model": [f"stablelm={tmp_path / 'stablelm'}"], "dtype": "float32", "cache_dir": str(tmp_path / "c")}
    messages: Any = [{"role": "user", "content": "hello there"}]
    with ServedApp(make_app(["transformers"], settings=settings), start_timeout=120) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(model="stablelm", messages=messages, max_tokens=4)
        assert refused.value.status_code == 503
        error = refused.value.body if isinstance(refused.value.body, dict) else {}
        assert error.get("code") == "model_load_failed", refused.value.body
        assert "StableLmForCausalLM" in str(error.get("message")) and "--transformers-engine simple" in str(
            error.get("message")
        )
    simple = make_app(["transformers"], settings={**settings, "transformers_engine": "simple"})
    with ServedApp(simple, start_timeout=120) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)
        reply = client.chat.completions.create(model="stablelm", messages=messages, max_tokens=4, temperature=0)
        assert reply.usage is not None and reply.usage.completion_tokens >= 1
