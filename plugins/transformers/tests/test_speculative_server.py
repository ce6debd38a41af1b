"""Prompt-lookup speculation end to end: a real server on a socket serving the
embedded SmolLM2 on the paged engine, the real ``openai`` client, the same
requests with speculation on and off (the setting is read per request).

A request that copies a passage of its prompt is drafted from the prompt; its
text, finish reason and usage are those without speculation, cut by ``max_tokens``
or by a stop string inside an accepted draft, with ``n > 1`` and with logprobs,
and ``/metrics`` counts drafted and accepted tokens.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from flexserv_transformers.testing import SMOLLM2_MISSING
from prometheus_client.parser import text_string_to_metric_families

from flexserv_core import ModelKind
from flexserv_core.testing import ServedApp, make_app

pytestmark = pytest.mark.slow  # the real SmolLM2 on a real socket

PASSAGE = (
    "The lighthouse at Point Reyes was built in 1870. Its first-order Fresnel lens, made in France, "
    "has 1,032 pieces of glass and could be seen twenty-four miles out to sea. Keepers climbed 300 steps "
    "down the cliff every evening to light the lamp."
)
MESSAGES: Any = [{"role": "user", "content": f"Here is a passage:\n\n{PASSAGE}\n\nRepeat the passage above exactly."}]


def metric(text: str, name: str) -> float:
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


@pytest.mark.parametrize("quantization", ["none", "int8"])
async def test_speculation_changes_nothing_but_speed(tmp_path_factory: pytest.TempPathFactory, quantization) -> None:
    """In float32, and on int8 rows (drafts through the batch-invariant layout, where the
    logprobs must be equal to the bit; the engine tests hold the cases that tell that
    layout from the old one)."""
    import openai

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cache = os.environ.get("FLEXSERV_CACHE_DIR") or str(Path(tmp_path_factory.getbasetemp()) / "flexserv-cache")
    # float32: a bf16 verify step (several positions in one matmul) rounds differently
    # from one-token decodes, enough to move logprobs by ~0.05 and flip near-ties
    settings = {
        "cache_dir": cache,
        "transformers_engine": "paged",
        "dtype": "float32",
        "transformers_quantization": quantization,
    }
    app = make_app(["transformers"], settings=settings)
    spec = app.state.flexserv.catalog.default(ModelKind.TEXT)
    if spec is None:
        pytest.fail(SMOLLM2_MISSING)
    with ServedApp(app) as base_url:
        client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="none", max_retries=0)
        await client.chat.completions.create(model=spec.name, messages=MESSAGES, max_tokens=1)  # loads it
        engine = app.state.flexserv.registry.model_if_loaded(spec.name).engine

        async def both(**body: Any) -> list[Any]:
            out = []
            for draft in (0, 32):  # 32: the default cap, drafts of 4 to 32 tokens
                engine.settings.transformers_speculative_draft_tokens = draft
                out.append(
                    await client.chat.completions.create(model=spec.name, messages=MESSAGES, temperature=0, **body)
                )
            return out

        plain, fast = await both(max_tokens=60)
        assert fast.choices[0].message.content == plain.choices[0].message.content
        assert fast.usage == plain.usage and fast.choices[0].finish_reason == plain.choices[0].finish_reason == "length"
        text = plain.choices[0].message.content
        assert text and "Fresnel lens" in text  # it copies: the drafts come from the prompt

        for cut in (5, 37, 90):
            plain_cut, fast_cut = await both(max_tokens=60, stop=[text[cut : cut + 6]])
            assert fast_cut.choices[0].message.content == plain_cut.choices[0].message.content == text[:cut]
            assert fast_cut.choices[0].finish_reason == "stop"
            assert fast_cut.usage == plain_cut.usage
        for m in (1, 7, 23):
            plain_m, fast_m = await both(max_tokens=m)
            assert fast_m.choices[0].message.content == plain_m.choices[0].message.content
            assert fast_m.usage == plain_m.usage and fast_m.usage.completion_tokens == m

        plain_n, fast_n = await both(max_tokens=40, n=3)
        assert [c.message.content for c in fast_n.choices] == [plain_n.choices[0].message.content] * 3
        assert fast_n.usage == plain_n.usage

        plain_lp, fast_lp = await both(max_tokens=30, logprobs=True, top_logprobs=2)
        a, b = plain_lp.choices[0].logprobs.content, fast_lp.choices[0].logprobs.content
        assert [t.token for t in a] == [t.token for t in b]
        assert max(abs(x.logprob - y.logprob) for x, y in zip(a, b, strict=True)) < 1e-3
        if quantization == "int8":
            assert [(t.logprob, [(x.token, x.logprob) for x in t.top_logprobs]) for t in a] == [
                (t.logprob, [(x.token, x.logprob) for x in t.top_logprobs]) for t in b
            ]

        async with httpx.AsyncClient(base_url=base_url) as http:
            metrics = (await http.get("/metrics")).text
        drafted = metric(metrics, "flexserv:spec_decode_num_draft_tokens_total")
        accepted = metric(metrics, "flexserv:spec_decode_num_accepted_tokens_total")
        assert drafted == engine.stats()["speculative"]["drafted_tokens"] > 0
        assert 0.5 * drafted < accepted <= drafted
        await client.close()
