"""Image input as a plugin: the core loads every ``image_url`` part through the
``flexserv_load_image`` hook, this plugin implements it, and without it an image
part is a 400 naming the plugin while everything else is served as before."""

from __future__ import annotations

import base64
import hashlib
import io
from typing import Any

import msgspec
import pytest
from PIL import Image

from flexserv_core import (
    ImageInput,
    InvalidRequest,
    LoadedModel,
    ModelSpec,
    ProgressCallback,
    RequestContext,
    create_plugin_manager,
    hookimpl,
)
from flexserv_core.testing import FakeBackendPlugin, FakeTextBackend, FakeTextModel, app_client, make_app


def png(color: tuple[int, int, int], size: tuple[int, int] = (12, 8)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


RED = png((220, 20, 20))
RED_URL = f"data:image/png;base64,{base64.b64encode(RED).decode()}"


class VisionModel(FakeTextModel):
    """Takes two images a request; records the images each rendered prompt carried."""

    def __init__(self, spec: ModelSpec, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        self.limits = msgspec.structs.replace(self.limits, max_images=2)
        self.images: list[ImageInput] = []

    def render_chat(self, messages: list[dict[str, Any]], template_kwargs: dict[str, Any]) -> list[int]:
        flat = []
        for message in messages:
            content = message["content"]
            if isinstance(content, list):
                self.images += [part["image"] for part in content if part["type"] == "image"]
                content = "".join(part.get("text", "<image>") for part in content)
            flat.append({**message, "content": content})
        return super().render_chat(flat, template_kwargs)


class VisionBackend(FakeTextBackend):
    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        model = VisionModel(spec)
        self.models.append(model)
        return model


class VisionPlugin(FakeBackendPlugin):
    def __init__(self) -> None:
        super().__init__("vlm")
        self.backend = VisionBackend()

    def loaded(self) -> VisionModel:
        model = self.backend.models[-1]
        assert isinstance(model, VisionModel)
        return model


def chat(url: str = RED_URL) -> dict[str, Any]:
    content = [{"type": "text", "text": "what is it?"}, {"type": "image_url", "image_url": {"url": url}}]
    return {"model": "vlm", "messages": [{"role": "user", "content": content}], "max_tokens": 2}


def responses(url: str = RED_URL) -> dict[str, Any]:
    content = [{"type": "input_text", "text": "what is it?"}, {"type": "input_image", "image_url": url}]
    return {"model": "vlm", "input": [{"role": "user", "content": content}], "max_output_tokens": 2}


REQUESTS = [
    ("/v1/chat/completions", chat, "messages[0].content[1]"),
    ("/v1/responses", responses, "input[0].content[1]"),
]


@pytest.mark.parametrize(("route", "body", "_param"), REQUESTS)
async def test_the_plugin_loads_the_image_the_model_renders(route: str, body: Any, _param: str) -> None:
    vision = VisionPlugin()
    async with app_client(make_app([vision, "image-input", "responses"])) as client:
        answer = await client.post(route, json=body())
        assert answer.status_code == 200, answer.text
    [image] = vision.loaded().images
    assert image.digest == hashlib.sha256(RED).hexdigest() and (image.width, image.height) == (12, 8)
    assert image.image.getpixel((1, 1)) == (220, 20, 20)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("route", "body", "param"), REQUESTS)
async def test_without_the_plugin_an_image_is_a_400_naming_it(route: str, body: Any, param: str, stream: bool) -> None:
    vision = VisionPlugin()
    async with app_client(make_app([vision, "responses"], block=["image-input"])) as client:
        answer = await client.post(route, json={**body(), "stream": stream})
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["code"] == "image_input_unavailable" and error["param"] == param
        assert error["type"] == "invalid_request_error"
        assert "'image-input' plugin" in error["message"] and "-p no:image-input" in error["message"]
        # everything else is served as before
        text = {"model": "vlm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert (await client.post("/v1/chat/completions", json=text)).status_code == 200
        assert (await client.get("/v1/models")).status_code == 200
    assert vision.loaded().images == []


def test_the_plugin_is_installed_on_by_default_and_blockable() -> None:
    """Through the real entry point, as ``flexserv run`` selects plugins."""
    loaded = create_plugin_manager()
    assert loaded.infos["image-input"].distribution == "flexserv-image-input"
    assert loaded.hook.flexserv_load_image.get_hookimpls()
    blocked = create_plugin_manager(["no:image-input"])
    assert not blocked.hook.flexserv_load_image.get_hookimpls()


class SchemePlugin:
    """A plugin that loads ``test:`` URLs itself and leaves the others to ``image-input``."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    @hookimpl
    async def flexserv_load_image(self, url: str, param: str, context: RequestContext) -> ImageInput | None:
        self.urls.append(url)
        if not url.startswith("test:"):
            return None
        if url != "test:blue":
            raise InvalidRequest(f"No test image {url!r}.", param=param, code="invalid_image")
        return ImageInput(image=Image.new("RGB", (3, 2), (0, 0, 255)), digest="blue")


async def test_an_earlier_plugin_takes_its_urls_and_leaves_the_others() -> None:
    vision, scheme = VisionPlugin(), SchemePlugin()
    async with app_client(make_app([vision, "image-input", scheme])) as client:
        assert (await client.post("/v1/chat/completions", json=chat("test:blue"))).status_code == 200
        assert (await client.post("/v1/chat/completions", json=chat())).status_code == 200
        refused = await client.post("/v1/chat/completions", json=chat("test:green"))
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "messages[0].content[1].image_url.url"
    assert [image.digest for image in vision.loaded().images] == ["blue", hashlib.sha256(RED).hexdigest()]
    assert scheme.urls == ["test:blue", RED_URL, "test:green"]


async def test_a_url_no_plugin_loads_is_a_400() -> None:
    vision = VisionPlugin()
    async with app_client(make_app([vision, SchemePlugin()])) as client:
        answer = await client.post("/v1/chat/completions", json=chat())
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "invalid_image_url" and error["param"] == "messages[0].content[1].image_url.url"
