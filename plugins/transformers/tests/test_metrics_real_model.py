"""/metrics with the embedded SmolLM2 on the paged engine: engine numbers move.

Two requests share a long system prompt, so the second finds its prefix blocks in
the cache; tokens counted equal the responses' usage.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from flexserv_transformers.testing import SMOLLM2_MISSING
from prometheus_client.parser import text_string_to_metric_families

from flexserv_core import ModelKind
from flexserv_core.testing import app_client, make_app

pytestmark = pytest.mark.slow

SYSTEM = "You are a terse assistant. " * 20  # several 16-token KV blocks


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_engine_numbers_and_usage_reach_metrics(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cache = os.environ.get("FLEXSERV_CACHE_DIR") or str(Path(tmp_path_factory.getbasetemp()) / "flexserv-cache")
    app = make_app(["transformers"], settings={"cache_dir": cache, "transformers_engine": "paged"})
    spec = app.state.flexserv.catalog.default(ModelKind.TEXT)
    if spec is None:
        pytest.fail(SMOLLM2_MISSING)
    name = (("model_name", spec.name),)
    async with app_client(app) as client:
        usage = {"prompt_tokens": 0, "completion_tokens": 0}
        for question in ("Name a colour.", "Name a fruit."):
            body = {
                "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
                "max_tokens": 6,
                "temperature": 0,
            }
            r = await client.post("/v1/chat/completions", json=body)
            assert r.status_code == 200
            for key in usage:
                usage[key] += r.json()["usage"][key]
        m = samples((await client.get("/metrics")).text)
    assert m[("flexserv:prompt_tokens_total", name)] == usage["prompt_tokens"]
    assert m[("flexserv:generation_tokens_total", name)] == usage["completion_tokens"]
    assert m[("flexserv:prefix_cache_queries_total", name)] > 0
    # the second prompt's shared system-prompt blocks were found in the cache
    assert m[("flexserv:prefix_cache_hits_total", name)] >= 16 * 4
    assert 0.0 <= m[("flexserv:kv_cache_usage_perc", name)] < 1.0
    assert 0.0 < m[("flexserv:kv_cache_resident_perc", name)] <= 1.0
    assert m[("flexserv:num_preemptions_total", name)] == 0
    assert m[("flexserv:time_to_first_token_seconds_count", name)] == 2
    assert m[("flexserv:num_requests_running", name)] == 0
