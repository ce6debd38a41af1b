"""docs/grafana-dashboard.json queries only metrics the server exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from flexserv_core.testing import FakeBackendPlugin, app_client, make_app

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


async def test_every_metric_the_dashboard_queries_is_exported() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {re.sub(r"_(bucket|total)$", "", m) for e in exprs for m in re.findall(r"flexserv:\w+", e)}
    # the audio and embeddings panels' counters are those plugins': the dashboard covers the default install
    async with app_client(make_app([FakeBackendPlugin(), "audio", "embeddings"])) as client:
        await client.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
        )
        text = (await client.get("/metrics")).text
    exported = {f.name for f in text_string_to_metric_families(text)}
    assert used
    assert used <= exported, sorted(used - exported)
