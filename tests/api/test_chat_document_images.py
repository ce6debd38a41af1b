"""The ``flexserv_load_document`` contract for models that take images: the hook is told
``images_allowed`` and ``max_images``, may return a :class:`DocumentContent` whose page
images the core loads through ``flexserv_load_image`` (the image-input plugin's limits),
and the request's page images are bounded; a plugin written before these arguments
(four of them, text only) keeps working. The fake model is given images after it loads."""

from __future__ import annotations

import io
import logging
from typing import Any

import msgspec
import pytest
from PIL import Image

from flexserv_core import DocumentContent, PageImage, RequestContext, TooManyPageImages, hookimpl
from flexserv_core.testing import app_client, make_app
from flexserv_core.testing.fakes import FakeBackendPlugin

CHAT = "/v1/chat/completions"


def png(size: tuple[int, int] = (40, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 10, 10)).save(buffer, "PNG")
    return buffer.getvalue()


class PagesPlugin:
    """``file_id`` ``scan-N``: N scanned pages (page images when allowed, else "(ocr)"
    text); ``liar``: 3 page images whatever ``max_images`` says; ``rogue``: a
    ``DocumentContent`` even when images are not allowed."""

    def __init__(self) -> None:
        self.calls: list[tuple[bool, int]] = []

    @hookimpl
    def flexserv_load_document(
        self,
        file: dict[str, Any],
        param: str,
        max_chars: int,
        context: RequestContext,
        images_allowed: bool,
        max_images: int,
    ) -> str | DocumentContent | None:
        self.calls.append((images_allowed, max_images))
        name = file["file_id"]
        if name == "rogue":
            return DocumentContent(("--- page 1 of 1 ---\n", PageImage(png())))
        count = 3 if name == "liar" else int(name.split("-")[1])
        if not images_allowed:
            return "\n".join(f"--- page {n} of {count} ---\n(ocr)" for n in range(1, count + 1))
        if name != "liar" and count > max_images:
            raise TooManyPageImages(count, param=param)
        parts: list[str | PageImage] = []
        for n in range(1, count + 1):
            parts += [("\n" if n > 1 else "") + f"--- page {n} of {count} ---\n", PageImage(png(), page=n)]
        return DocumentContent(tuple(parts))


class OldPlugin:
    """A plugin written before page images: four arguments, text."""

    @hookimpl
    def flexserv_load_document(self, file: dict[str, Any], param: str, max_chars: int, context: RequestContext) -> str:
        return "--- page 1 of 1 ---\nold"


def render(messages: list[dict[str, Any]], template_kwargs: dict[str, Any]) -> list[int]:
    """The fake's prompt with image parts as ``<image WxH>``."""
    lines = []
    for m in messages:
        content = m["content"]
        if isinstance(content, list):
            content = "".join(
                p["text"] if p["type"] == "text" else f"<image {p['image'].width}x{p['image'].height}>" for p in content
            )
        lines.append(f"{m['role']}: {content}")
    return [ord(c) for c in "\n".join(lines) + "\nassistant: "]


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": list(parts)}], "max_tokens": 2}


def doc(file_id: str) -> dict[str, Any]:
    return {"type": "file", "file": {"file_id": file_id}}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def image(size: tuple[int, int] = (8, 8)) -> dict[str, Any]:
    import base64

    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png(size)).decode()}}


@pytest.fixture
def pages() -> PagesPlugin:
    return PagesPlugin()


@pytest.fixture
def flexserv_plugins(fake: FakeBackendPlugin, pages: PagesPlugin) -> list[object | str]:
    return [fake, "tool-parsers", "image-input", pages]


@pytest.fixture
def flexserv_settings() -> dict[str, Any]:
    return {"max_document_page_images": 3}


async def as_vlm(client: Any, fake: FakeBackendPlugin, max_images: int = 4) -> Any:
    """Load the fake model, then let it take ``max_images`` images per request."""
    assert (await client.post(CHAT, json=user(text("hi")))).status_code == 200
    model = fake.backend.models[0]
    model.limits = msgspec.structs.replace(model.limits, max_images=max_images)
    model.render_chat = render
    return model


async def test_a_text_only_model_gets_text(flexserv_client: Any, fake: FakeBackendPlugin, pages: PagesPlugin) -> None:
    r = await flexserv_client.post(CHAT, json=user(text("Read:"), doc("scan-2")))
    assert r.status_code == 200, r.text
    assert fake.backend.models[0].last_prompt.startswith("user: Read:\n\n--- page 1 of 2 ---\n(ocr)\n--- page 2")
    assert pages.calls == [(False, 0)]


async def test_page_images_go_in_place_through_the_image_plugin(
    flexserv_client: Any, fake: FakeBackendPlugin, pages: PagesPlugin
) -> None:
    model = await as_vlm(flexserv_client, fake)
    r = await flexserv_client.post(CHAT, json=user(text("Read:"), doc("scan-2"), text("Done.")))
    assert r.status_code == 200, r.text
    assert model.last_prompt == (
        "user: Read:\n\n--- page 1 of 2 ---\n<image 40x30>\n--- page 2 of 2 ---\n<image 40x30>Done.\nassistant: "
    )
    # one image part leaves the model 3 of its 4, and the setting's 3 bound it too
    r = await flexserv_client.post(CHAT, json=user(image(), doc("scan-1")))
    assert r.status_code == 200, r.text
    assert pages.calls == [(True, 3), (True, 3)]
    # /tokenize takes no images: documents are read as text there
    r = await flexserv_client.post("/tokenize", json={"messages": user(doc("scan-1"))["messages"]})
    assert r.status_code == 200 and pages.calls[-1] == (False, 0)


@pytest.mark.parametrize(
    ("parts", "names"),
    [
        ([doc("scan-4")], ["4 pages without a text layer", "at most 3 per request (--max-document-page-images)"]),
        ([doc("scan-2"), doc("scan-2")], ["4 pages without a text layer", "--max-document-page-images"]),
        (
            [image(), image(), doc("scan-3")],
            ["3 pages", "'fake-model' takes at most 4 images per request, 2 of them taken by the request's image"],
        ),
        ([image(), image(), doc("liar")], ["3 pages", "'fake-model' takes at most 4 images"]),  # ignored its bound
    ],
)
async def test_too_many_page_images(
    flexserv_client: Any, fake: FakeBackendPlugin, parts: list[dict[str, Any]], names: list[str]
) -> None:
    model = await as_vlm(flexserv_client, fake)
    served = len(model.requests)
    r = await flexserv_client.post(CHAT, json=user(*parts))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "too_many_page_images" and error["param"] == f"messages[0].content[{len(parts) - 1}].file"
    for name in names:
        assert name in error["message"]
    assert len(model.requests) == served


@pytest.mark.parametrize("flexserv_settings", [{"image_input_max_pixels": 1000}])
async def test_a_page_image_larger_than_image_input_allows_is_refused(
    flexserv_client: Any, fake: FakeBackendPlugin
) -> None:
    await as_vlm(flexserv_client, fake)
    r = await flexserv_client.post(CHAT, json=user(doc("scan-1")))  # 40 x 30 = 1200 pixels
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "messages[0].content[0].file"


async def test_a_document_content_where_images_are_not_allowed_is_a_plugin_error(
    flexserv_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        r = await flexserv_client.post(CHAT, json=user(doc("rogue")))  # the model takes no images
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"
    assert "expected a str (images_allowed was false)" in caplog.text  # logged as the plugin's error


async def test_a_plugin_with_the_old_four_arguments_still_serves_a_vlm() -> None:
    fake = FakeBackendPlugin()
    async with app_client(make_app([fake, "tool-parsers", "image-input", OldPlugin()])) as client:
        model = await as_vlm(client, fake)
        r = await client.post(CHAT, json=user(text("Read:"), doc("any")))
        assert r.status_code == 200, r.text
        assert model.last_prompt == "user: Read:\n\n--- page 1 of 1 ---\nold\nassistant: "


@pytest.mark.parametrize(
    ("plugins", "settings"),
    [(["tool-parsers"], {}), (["tool-parsers", "image-input"], {"max_document_page_images": 0})],
    ids=["without-image-input", "setting-0"],
)
async def test_a_vlm_gets_text_without_the_image_plugin_or_with_the_setting_0(
    plugins: list[str], settings: dict[str, Any]
) -> None:
    fake, pages = FakeBackendPlugin(), PagesPlugin()
    async with app_client(make_app([fake, *plugins, pages], settings=settings)) as client:
        model = await as_vlm(client, fake)
        r = await client.post(CHAT, json=user(doc("scan-1")))
        assert r.status_code == 200, r.text
        assert model.last_prompt == "user: --- page 1 of 1 ---\n(ocr)\nassistant: "
        assert pages.calls == [(False, 0)]
