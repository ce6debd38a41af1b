"""End to end with real readings: the psutil probe of the resources plugin and a
real model, with the RAM threshold set below what the machine uses now."""

from __future__ import annotations

import importlib.util
import logging

import psutil
import pytest
from oom_helpers import EventRecorder

from flexserv_core.testing import app_client, make_app, openai_client, wait_until_async

pytestmark = pytest.mark.slow


async def test_real_embedding_model_is_evicted_on_real_ram_reading(caplog: pytest.LogCaptureFixture) -> None:
    """all-MiniLM-L6-v2 (sentence-transformers plugin, real weights) is loaded by a
    request, evicted by the monitor reading psutil, and reloaded by the next request."""
    if importlib.util.find_spec("flexserv_sentence_transformers") is None:
        pytest.fail("flexserv-sentence-transformers is not installed; `make setup` installs every plugin")
    used = psutil.virtual_memory().percent
    threshold = max(0.5, round(used / 2, 1))  # below the current use: always met
    recorder = EventRecorder()
    app = make_app(
        ["embeddings", "sentence-transformers", "resources", "oom-monitor", recorder],
        settings={
            "oom_monitor": True,
            "oom_monitor_ram_threshold": threshold,
            "oom_monitor_check_interval": 0.2,
            "oom_monitor_settle_seconds": 0.2,
        },
    )
    async with app_client(app) as client:
        sdk = openai_client(client)
        server = app.state.flexserv
        with caplog.at_level(logging.WARNING, logger="flexserv.oom_monitor"):
            res = await sdk.embeddings.create(input=["memory pressure"], model="all-MiniLM-L6-v2")
            assert len(res.data[0].embedding) == 384
            await wait_until_async(lambda: recorder.evicted() != [], 30, message="the monitor evicted the real model")
        assert recorder.evicted()[0][:2] == ("all-MiniLM-L6-v2", "oom")
        await wait_until_async(lambda: server.registry.loaded() == [], 30, message="the model was freed")
        health = (await client.get("/v1/flexserv/health")).json()["oom_monitor"]
        last = health["last_eviction"]
        assert last["models"] == ["all-MiniLM-L6-v2"] and last["resource"] == "ram"
        assert last["reading"]["ram_percent"] >= threshold == last["threshold"]
        assert abs(last["reading"]["ram_percent"] - psutil.virtual_memory().percent) < 20, "a real reading"
        warnings = [r.getMessage() for r in caplog.records if "evicting model 'all-MiniLM-L6-v2'" in r.getMessage()]
        assert warnings and f"threshold {threshold:g}%" in warnings[0]
        # the next request loads it again and is answered
        res = await sdk.embeddings.create(input=["again"], model="all-MiniLM-L6-v2")
        assert len(res.data[0].embedding) == 384
        loads = [e for e in recorder.events if e.type == "loaded" and e.model_id == "all-MiniLM-L6-v2"]
        assert len(loads) == 2
