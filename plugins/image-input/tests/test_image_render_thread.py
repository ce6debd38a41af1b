"""Rendering a prompt with images (the image processor: tens of ms per image) runs
off the event loop, so other requests are served meanwhile.

The model here renders image prompts only once the test opens a gate; while one
image request waits at that gate, ``/health`` and a text-only chat request must
be answered by the same server. Ordering is asserted from the events the render
and the test record, on a real loopback socket (uvicorn in a thread of its own).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import msgspec
import pytest

from flexserv_core import LoadedModel, ModelSpec, ProgressCallback
from flexserv_core.testing import FakeBackendPlugin, FakeTextBackend, FakeTextModel, ServedApp, make_app

#: A 1x1 PNG.
PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)
#: Longest the gated render waits: the old, blocking path would serve nothing for that long.
GATE_TIMEOUT = 10.0


class GatedVisionModel(FakeTextModel):
    """Takes images; rendering a prompt with images waits for ``gate``."""

    def __init__(self, spec: ModelSpec, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        self.limits = msgspec.structs.replace(self.limits, max_images=2)
        self.gate = threading.Event()
        self.render_started = threading.Event()
        self.events: list[str] = []
        self.render_threads: set[str] = set()

    def render_chat(self, messages: list[dict[str, Any]], template_kwargs: dict[str, Any]) -> list[int]:
        if any(isinstance(m["content"], list) for m in messages):
            self.render_threads.add(threading.current_thread().name)
            self.render_started.set()
            self.gate.wait(GATE_TIMEOUT)
            self.events.append("image render done")
            text = [{**m, "content": "".join(p.get("text", "<image>") for p in m["content"])} for m in messages]
            return super().render_chat(text, template_kwargs)
        return super().render_chat(messages, template_kwargs)


class GatedBackend(FakeTextBackend):
    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        model = GatedVisionModel(spec)
        self.models.append(model)
        return model


class GatedPlugin(FakeBackendPlugin):
    def __init__(self) -> None:
        super().__init__()
        self.backend = GatedBackend()


def image_request(route: str, stream: bool) -> dict[str, Any]:
    if route == "/v1/responses":
        content: list[dict[str, Any]] = [
            {"type": "input_image", "image_url": PIXEL},
            {"type": "input_text", "text": "what is it?"},
        ]
        return {"model": "fake-model", "input": [{"role": "user", "content": content}], "stream": stream}
    content = [{"type": "image_url", "image_url": {"url": PIXEL}}, {"type": "text", "text": "what is it?"}]
    return {
        "model": "fake-model",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 3,
        "stream": stream,
    }


@pytest.mark.parametrize(
    ("route", "stream"),
    [
        ("/v1/chat/completions", False),
        ("/v1/chat/completions", True),
        ("/v1/responses", False),
        ("/v1/responses", True),
    ],
)
async def test_other_requests_are_served_while_an_image_prompt_renders(route: str, stream: bool) -> None:
    plugin = GatedPlugin()
    with ServedApp(make_app([plugin, "image-input", "responses"])) as base_url:
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
            # load the model first (a text request renders on the loop, no gate)
            warm = await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "a"}]})
            assert warm.status_code == 200, warm.text
            model = plugin.backend.models[0]
            assert isinstance(model, GatedVisionModel)

            image = asyncio.create_task(client.post(route, json=image_request(route, stream)))
            assert await asyncio.to_thread(model.render_started.wait, GATE_TIMEOUT)
            health = await client.get("/health")
            model.events.append(f"health {health.status_code}")
            text = await client.post(
                "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            )
            model.events.append(f"text {text.status_code}")
            model.gate.set()
            answer = await image
            assert answer.status_code == 200, answer.text

    assert model.events == ["health 200", "text 200", "image render done"]
    assert "uvicorn" not in model.render_threads  # the server's event loop runs in the thread named uvicorn
