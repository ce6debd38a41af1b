"""The playground end to end: a real headless Chromium against a real ``flexserv run``
serving the embedded models (SmolLM2, MiniLM, Whisper tiny.en)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playground_browser import flexserv_process, launched_browser

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
SPEECH = ROOT / "tests" / "data" / "speech.wav"
CHAT_MODEL = "SmolLM2-135M-Instruct"
EMBEDDING_MODEL = "all-MiniLM-L6-v2"
# Generous: the embedded models run on a CPU that may be shared with other work.
MODEL_TIMEOUT_MS = 240_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with launched_browser() as b:
        yield b


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with flexserv_process(tmp_path_factory.mktemp("flexserv") / "flexserv.log") as base:
        yield base


@pytest.fixture
def page(browser: Any, server: str) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{server}/")
    page.wait_for_selector(f'#chat-model option[value="{CHAT_MODEL}"]', state="attached")
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def loaded_models(server: str) -> dict[str, dict[str, Any]]:
    body = httpx.get(f"{server}/v1/flexserv/models/loaded", timeout=30).json()
    return {m["model_id"]: m for m in body["models"]}


def wait_for_server(predicate: Any, server: str, timeout: float = 60) -> dict[str, dict[str, Any]]:
    import time

    deadline = time.monotonic() + timeout
    while True:
        models = loaded_models(server)
        if predicate(models):
            return models
        if time.monotonic() > deadline:
            raise AssertionError(f"server never reached the expected state: {models}")
        time.sleep(0.25)


STREAMING_WITH_TEXT = """() => {
  const m = [...document.querySelectorAll('.msg.assistant')].pop();
  return m && m.dataset.state === 'streaming' && m.querySelector('.content').textContent.length > 0;
}"""


def test_root_redirects_and_page_loads(page: Any, server: str) -> None:
    assert page.url == f"{server}/playground#chat"
    assert page.title() == "FlexServ playground"
    kinds = page.eval_on_selector_all("#emb-model option", "os => os.map(o => o.value)")
    assert kinds == [EMBEDDING_MODEL]


def test_chat_streams_tokens_before_the_answer_completes(page: Any) -> None:
    page.fill("#chat-temperature", "0")
    page.fill("#chat-max-tokens", "12")
    page.fill("#chat-input", "Name three colours.")
    page.keyboard.press("Control+Enter")
    page.wait_for_function(STREAMING_WITH_TEXT, timeout=MODEL_TIMEOUT_MS)
    partial = page.inner_text(".msg.assistant .content")
    page.wait_for_selector('.msg.assistant[data-state="done"]', timeout=MODEL_TIMEOUT_MS)
    final = page.inner_text(".msg.assistant .content")
    assert final.startswith(partial) and len(final) > len(partial), (partial, final)
    stats = page.inner_text("#chat-stats")
    assert "TTFT" in stats and "tok/s" in stats and "12 tokens" in stats, stats
    # The conversation goes on: the second request carries the first exchange.
    page.fill("#chat-max-tokens", "2")
    page.fill("#chat-input", "And one more?")
    page.click("#chat-send")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.msg.assistant')].filter(m => m.dataset.state === 'done').length === 2",
        timeout=MODEL_TIMEOUT_MS,
    )
    assert page.locator(".msg.user").count() == 2


def test_stop_cancels_the_request_on_the_server(page: Any, server: str) -> None:
    page.fill("#chat-max-tokens", "400")
    page.fill("#chat-input", "Write a long story about a lighthouse keeper.")
    page.click("#chat-send")
    page.wait_for_function(STREAMING_WITH_TEXT, timeout=MODEL_TIMEOUT_MS)
    assert loaded_models(server)[CHAT_MODEL]["active_requests"] == 1
    page.click("#chat-stop-button")
    page.wait_for_selector('.msg.assistant[data-state="stopped"]', timeout=10_000)
    wait_for_server(lambda models: models[CHAT_MODEL]["active_requests"] == 0, server, timeout=30)
    assert page.is_visible("#chat-send") and not page.is_visible("#chat-stop-button")


def test_embeddings_heat_map(page: Any) -> None:
    page.click("#tab-embeddings")
    page.click("#emb-run")
    page.wait_for_selector("table.heatmap td", timeout=MODEL_TIMEOUT_MS)
    values = page.eval_on_selector_all(
        "table.heatmap tbody tr",
        "rows => rows.map(r => [...r.querySelectorAll('td')].map(td => Number(td.dataset.value)))",
    )
    assert len(values) == 5 and all(len(row) == 5 for row in values)
    for i in range(5):
        assert values[i][i] == pytest.approx(1.0, abs=1e-3)
        for j in range(5):
            assert values[i][j] == pytest.approx(values[j][i], abs=1e-4)
    # Sentence 1 (a cat on a mat) is closer to 2 (a kitten on a rug) than to 3 (stock markets).
    assert values[0][1] > values[0][2] + 0.2
    assert values[2][3] > values[2][4]


def test_anomaly_tab_fits_scores_and_plots(page: Any, server: str) -> None:
    page.click("#tab-anomaly")
    page.wait_for_selector('#an-backend option[value="robust_zscore"]', state="attached")
    assert page.is_hidden("#an-missing")
    page.select_option("#an-backend", "robust_zscore")
    page.click("#an-run")
    page.wait_for_selector("#an-results tbody tr", timeout=MODEL_TIMEOUT_MS)
    rows = page.eval_on_selector_all(
        "#an-results tbody tr",
        "rs => rs.map(r => ({index: Number(r.dataset.index), anomaly: r.dataset.anomaly === 'true'}))",
    )
    try:
        # The sample CSV's outliers are its 8th (35.0, 2.90) and 13th (5.0, 0.10) data rows: the top two.
        assert {rows[0]["index"], rows[1]["index"]} == {7, 12}
        assert rows[0]["anomaly"] and rows[1]["anomaly"] and not rows[2]["anomaly"]
        assert page.get_attribute("#an-plot", "data-points") == "14"
        assert page.get_attribute("#an-plot", "data-anomalies") == "2"
        assert "robust_zscore on 14 rows" in page.inner_text("#an-status")
        stored = httpx.get(f"{server}/v1/anomaly/models/playground", timeout=30).json()
        assert stored["features"] == ["temperature", "vibration"] and stored["samples"] == 14
    finally:
        httpx.delete(f"{server}/v1/anomaly/models/playground", timeout=30)  # the server's store is the user's cache


def test_transcribe_an_uploaded_file(page: Any) -> None:
    page.click("#tab-transcription")
    page.set_input_files("#tr-file", str(SPEECH))
    page.click("#tr-run")
    page.wait_for_function(
        "() => document.getElementById('tr-status').textContent.startsWith('Done')", timeout=MODEL_TIMEOUT_MS
    )
    text = page.inner_text("#tr-text").lower()
    for word in ("weekly report", "team", "friday"):
        assert word in text, text
    assert page.locator("#tr-segments li").count() >= 1


def test_server_tab_loads_and_unloads_a_model(page: Any, server: str) -> None:
    httpx.post(f"{server}/v1/flexserv/models/unload", json={"model_id": EMBEDDING_MODEL}, timeout=30)
    wait_for_server(lambda models: EMBEDDING_MODEL not in models, server)
    page.click("#tab-server")
    row = page.locator(f'#models-table tr[data-model="{EMBEDDING_MODEL}"]')
    row.locator('button[data-action="load"]').click(timeout=30_000)
    page.wait_for_selector(
        f'#models-table tr[data-model="{EMBEDDING_MODEL}"][data-state="ready"]', timeout=MODEL_TIMEOUT_MS
    )
    assert loaded_models(server)[EMBEDDING_MODEL]["state"] == "ready"
    assert row.locator("td").nth(3).inner_text() == "cpu"

    row.locator('button[data-action="unload"]').click()
    page.wait_for_selector(f'#models-table tr[data-model="{EMBEDDING_MODEL}"][data-state="unloaded"]', timeout=30_000)
    assert EMBEDDING_MODEL not in loaded_models(server)
    assert EMBEDDING_MODEL in page.inner_text("#models-status")


def test_server_tab_shows_resources_charts_and_plugins(page: Any) -> None:
    page.click("#tab-server")
    page.wait_for_selector('#charts .card[data-chart="cpu"]', timeout=30_000)
    page.wait_for_selector('#plugins-table tr[data-plugin="playground"]', timeout=30_000)
    assert page.locator("#resources .core").count() >= 1
    # Until a metrics plugin serves /metrics, the page says so instead of failing.
    metrics = httpx.get(page.url.split("/playground")[0] + "/metrics", timeout=10)
    if metrics.status_code == 404:
        page.wait_for_function("() => document.getElementById('metrics-note').textContent.includes('/metrics')")


def test_metrics_parser_reads_the_prometheus_text_format(page: Any) -> None:
    exposition = "\n".join(
        [
            "# HELP flexserv:num_requests_running Requests in the batch.",
            "# TYPE flexserv:num_requests_running gauge",
            'flexserv:num_requests_running{model_name="a"} 2',
            'flexserv:num_requests_running{model_name="b\\"q"} 1',
            "flexserv:kv_cache_usage_perc 0.25 1700000000000",
            "flexserv:generation_tokens_total 1.5e3",
        ]
    )
    result = page.evaluate(
        """async (text) => {
            const m = await import('/playground/static/metrics.js');
            const samples = m.parsePrometheus(text);
            return {running: m.total(samples, 'flexserv:num_requests_running'),
                    kv: m.mean(samples, 'flexserv:kv_cache_usage_perc'),
                    tokens: m.total(samples, 'flexserv:generation_tokens_total'),
                    missing: m.total(samples, 'flexserv:nope'),
                    label: samples[1].labels.model_name};
        }""",
        exposition,
    )
    assert result == {"running": 3, "kv": 0.25, "tokens": 1500, "missing": None, "label": 'b"q'}


def test_theme_toggle_switches_light_and_dark(page: Any) -> None:
    background = "() => getComputedStyle(document.body).backgroundColor"
    page.click("#theme-button")  # auto -> light
    light = page.evaluate(background)
    page.click("#theme-button")  # light -> dark
    dark = page.evaluate(background)
    assert light != dark
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"


def test_without_the_plugin_the_page_is_404(browser: Any, tmp_path: Path) -> None:
    with flexserv_process(tmp_path / "flexserv.log", "-p", "no:playground") as base:
        page = browser.new_page()
        try:
            assert page.goto(f"{base}/playground").status == 404
            assert page.goto(f"{base}/").status == 404
        finally:
            page.close()


def test_api_key_is_asked_for_and_kept_in_the_session(browser: Any, tmp_path: Path) -> None:
    with flexserv_process(tmp_path / "flexserv.log", "--api-key", "let-me-in") as base:
        context = browser.new_context()
        page = context.new_page()
        try:
            page.goto(f"{base}/")
            page.wait_for_selector("#key-dialog[open]", timeout=30_000)
            page.fill("#key-input", "let-me-in")
            page.press("#key-input", "Enter")
            page.wait_for_selector(f'#chat-model option[value="{CHAT_MODEL}"]', state="attached", timeout=30_000)
            assert page.evaluate("sessionStorage.getItem('flexserv.apiKey')") == "let-me-in"
            assert page.evaluate("localStorage.getItem('flexserv.apiKey')") is None
        finally:
            context.close()


def test_keyboard_switches_tabs(page: Any) -> None:
    page.keyboard.press("Alt+2")
    assert page.is_visible("#panel-embeddings") and not page.is_visible("#panel-chat")
    assert page.evaluate("document.activeElement.id") == "tab-embeddings"
    page.keyboard.press("ArrowRight")
    assert page.is_visible("#panel-transcription")
    assert page.url.endswith("#transcription")
    page.keyboard.press("Alt+6")  # the last tab has its digit too
    assert page.is_visible("#panel-anomaly") and page.evaluate("document.activeElement.id") == "tab-anomaly"


@pytest.mark.parametrize("tab", ["chat", "embeddings", "transcription", "documents", "server", "anomaly"])
def test_fits_a_phone_screen(browser: Any, server: str, tab: str) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 800}, is_mobile=True)
    try:
        page = context.new_page()
        page.goto(f"{server}/playground#{tab}")
        page.wait_for_selector(f"#panel-{tab}:not([hidden])")
        page.wait_for_timeout(500)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the {tab} tab is {overflow} px wider than a phone screen"
    finally:
        context.close()


def test_feature_demos_appear_only_when_advertised(browser: Any, server: str) -> None:
    """The real server lists JSON mode and tools in /info's `features`, so the boxes show;
    a server that lists none hides them. The requests carry the right fields. The
    feature-less /info and the answer are substituted in the browser (route
    interception); everything else is the real server."""
    import json

    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(f"{server}/playground")
        page.wait_for_selector('#plugins-table tr[data-plugin="playground"]', state="attached")
        page.wait_for_selector("#chat-format-box:not([hidden])")
        assert page.is_visible("#chat-tools-box")

        def without_features(route: Any) -> None:
            info = route.fetch().json()
            info["features"] = []
            route.fulfill(json=info)

        page.route("**/v1/flexserv/info", without_features)
        page.reload()
        page.wait_for_selector('#plugins-table tr[data-plugin="playground"]', state="attached")
        assert not page.is_visible("#chat-format-box") and not page.is_visible("#chat-tools-box")
        page.unroute("**/v1/flexserv/info")

        sent: list[dict[str, Any]] = []
        tool_call = {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                            }
                        ]
                    },
                    "finish_reason": "tool_calls",
                }
            ]
        }

        def answer(route: Any) -> None:
            sent.append(json.loads(route.request.post_data))
            route.fulfill(
                status=200, content_type="text/event-stream", body=f"data: {json.dumps(tool_call)}\n\ndata: [DONE]\n\n"
            )

        page.route("**/v1/chat/completions", answer)
        page.reload()
        page.wait_for_selector("#chat-format-box:not([hidden])")
        page.select_option("#chat-format", "json_schema")
        page.check("#chat-tools")
        page.fill("#chat-input", "Weather in Paris?")
        page.click("#chat-send")
        page.wait_for_selector('.msg.assistant[data-state="done"] .tool-call')
        assert page.inner_text(".tool-call") == '→ get_weather({"city": "Paris"})'
        assert sent[0]["response_format"]["type"] == "json_schema"
        assert sent[0]["response_format"]["json_schema"]["name"] == "city"
        assert sent[0]["tools"][0]["function"]["name"] == "get_weather"
        assert sent[0]["stream"] is True and sent[0]["messages"][-1]["content"] == "Weather in Paris?"
    finally:
        context.close()


def test_sse_reader_handles_events_split_across_reads(page: Any) -> None:
    """The stream arrives in arbitrary pieces: an event cut mid-JSON, CRLF line ends,
    comments and several events in one read."""
    events = page.evaluate(
        """async () => {
            const { sseEvents } = await import('/playground/static/api.js');
            const pieces = [': keep-alive\\n\\ndata: {"a"', ': 1}\\r\\n\\r\\ndata: {"b": 2}\\n\\ndata: {"c"',
                            ': 3}\\n\\ndata: [DONE]\\n\\ndata: {"after": true}\\n\\n'];
            const stream = new ReadableStream({ start(c) {
                const enc = new TextEncoder();
                pieces.forEach((p) => c.enqueue(enc.encode(p)));
                c.close();
            } });
            const out = [];
            for await (const e of sseEvents(new Response(stream))) out.push(e);
            return out;
        }"""
    )
    assert events == [{"a": 1}, {"b": 2}, {"c": 3}]
