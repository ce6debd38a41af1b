"""The core's side of chat ``file`` parts: the ``flexserv_expand_file_parts`` hook's
parts replace each file part and are served as the client's own (text in the prompt
and in ``/tokenize``'s count, images through ``flexserv_load_image`` under its
limits, tokens against the context); errors about them name the file part; without a
plugin a file part is a 400 naming the one to install. What the parts say (budgets,
page markers, blank lines) is the plugin's: the ocr plugin's tests cover it."""

from __future__ import annotations

import base64
import io
import logging
import re
import types
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from flexserv_core import NotFound, RequestContext, TextGenerationModel, hookimpl
from flexserv_core.testing import app_client, make_app
from flexserv_core.testing.fakes import FakeBackendPlugin

CHAT = "/v1/chat/completions"
DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
CONTEXT = 4096  # FakeTextModel's context_length


def png_url(size: tuple[int, int] = (40, 30)) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 10, 10)).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def doc(file_id: str) -> dict[str, Any]:
    return {"type": "file", "file": {"file_id": file_id}}


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": list(parts)}], "max_tokens": 2}


#: What the fake plugin puts in place of a ``file_id``.
DOCS: dict[str, list[dict[str, Any]]] = {
    "note": [text("[note]")],
    "scan": [text("[page 1]"), image(png_url())],
    "long": [text("y" * (CONTEXT + 10))],  # the fake's tokens are characters
    "three": [image(png_url()) for _ in range(3)],
    "bad": [{"type": "video", "text": "x"}],
}


class FilesPlugin:
    """Replaces ``file_id`` s from :data:`DOCS` (none for ``unread``); records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[dict[str, Any]], TextGenerationModel, bool, Any]] = []

    @hookimpl
    async def flexserv_expand_file_parts(
        self, messages: list[dict[str, Any]], model: TextGenerationModel, images: bool, context: RequestContext
    ) -> dict[tuple[int, int], list[dict[str, Any]]] | None:
        self.calls.append((messages, model, images, context.request))
        out = {}
        for i, message in enumerate(messages):
            for j, part in enumerate(message["content"]):
                if part["type"] == "file":
                    name = part["file"]["file_id"]
                    if name == "missing":
                        raise NotFound("No such file.", param=f"messages[{i}].content[{j}].file.file_id")
                    if name != "unread":
                        out[(i, j)] = DOCS[name]
        return out


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> FakeBackendPlugin:
    """The fake model: text only, or (tests marked :data:`VLM`) 4 images per request."""
    return FakeBackendPlugin(max_images=getattr(request, "param", 0))


VLM = pytest.mark.parametrize("fake", [4], indirect=True)


@pytest.fixture
def files() -> FilesPlugin:
    return FilesPlugin()


@pytest.fixture
def flexserv_plugins(fake: FakeBackendPlugin, files: FilesPlugin) -> list[object | str]:
    return [fake, "tool-parsers", "image-input", files, "tokenize"]


async def test_without_a_plugin_a_file_part_names_the_plugin() -> None:
    async with app_client(make_app([FakeBackendPlugin(), "tool-parsers"])) as http:
        r = await http.post(CHAT, json=user(text("Sum up:"), doc("note")))
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "document_input_unavailable" and error["param"] == "messages[0].content[1]"
        assert "'ocr' plugin" in error["message"] and "flexserv-ocr" in error["message"]
        assert "-p no:ocr" in error["message"]
        # text-only requests are served as before
        assert (await http.post(CHAT, json=user(text("hi")))).status_code == 200


async def test_the_parts_replace_the_file_part_in_the_prompt_and_in_tokenize(
    flexserv_client: Any, fake: FakeBackendPlugin, files: FilesPlugin
) -> None:
    body = user(text("Read:"), doc("note"), text("Done."))
    r = await flexserv_client.post(CHAT, json=body)
    assert r.status_code == 200, r.text
    model = fake.backend.models[0]
    assert model.last_prompt == "user: Read:[note]Done.\nassistant: "
    assert r.json()["usage"]["prompt_tokens"] == len(model.last_prompt)  # one token a character
    messages, seen, images, request = files.calls[0]
    assert messages[0]["content"][1]["file"] == {"file_id": "note", "file_data": None, "filename": None}
    assert seen is model and images is False and request is not None  # a text-only model: no images
    count = await flexserv_client.post("/tokenize", json={"messages": body["messages"]})
    assert count.status_code == 200 and count.json()["count"] == len(model.last_prompt)


@pytest.mark.parametrize(
    ("parts", "status", "code", "param"),
    [
        ([text("x"), doc("unread")], 400, "invalid_file", "messages[0].content[1].file"),
        ([text("x"), doc("missing")], 404, "not_found", "messages[0].content[1].file.file_id"),
        ([doc("long")], 400, "context_length_exceeded", "messages"),  # the prompt's tokens, checked by the core
    ],
)
async def test_refusals(flexserv_client: Any, parts: list[dict[str, Any]], status: int, code: str, param: str) -> None:
    r = await flexserv_client.post(CHAT, json=user(*parts))
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == (code, param)


async def test_image_parts_for_a_text_only_model_are_the_plugin_s_error(
    flexserv_client: Any, files: FilesPlugin, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        r = await flexserv_client.post(CHAT, json=user(doc("scan")))
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"
    assert "expected text parts (images was false)" in caplog.text
    assert files.calls[-1][2] is False


@VLM
async def test_image_parts_are_loaded_for_a_vlm(
    flexserv_client: Any, fake: FakeBackendPlugin, files: FilesPlugin
) -> None:
    r = await flexserv_client.post(CHAT, json=user(text("Read:"), doc("scan"), text("Done.")))
    assert r.status_code == 200, r.text
    assert fake.backend.models[0].last_prompt == "user: Read:[page 1]<image 40x30>Done.\nassistant: "
    assert files.calls[-1][2] is True
    # /tokenize renders no images
    r = await flexserv_client.post("/tokenize", json={"messages": user(doc("note"))["messages"]})
    assert r.status_code == 200 and files.calls[-1][2] is False


@pytest.mark.parametrize(
    ("parts", "code", "param"),
    [
        ([image(png_url()), image(png_url()), doc("three")], "too_many_images", "messages[0].content[2].file"),
        ([doc("bad")], "internal_error", None),  # not a text or image_url part
    ],
)
@VLM
async def test_the_parts_are_held_to_the_core_s_limits(
    flexserv_client: Any, fake: FakeBackendPlugin, parts: list[dict[str, Any]], code: str, param: str | None
) -> None:
    r = await flexserv_client.post(CHAT, json=user(*parts))
    error = r.json()["error"]
    assert (error["code"], error["param"]) == (code, param), r.text
    assert fake.backend.models[0].requests == []  # nothing was generated


@VLM
@pytest.mark.parametrize("flexserv_settings", [{"image_input_max_pixels": 1000}])
async def test_an_image_the_image_plugin_refuses_names_the_file_part(flexserv_client: Any) -> None:
    r = await flexserv_client.post(CHAT, json=user(text("x"), doc("scan")))  # 40 x 30 = 1200 pixels
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "messages[0].content[1].file"


async def test_without_the_image_plugin_a_vlm_gets_no_images() -> None:
    files = FilesPlugin()
    async with app_client(make_app([FakeBackendPlugin(max_images=4), "tool-parsers", files])) as client:
        r = await client.post(CHAT, json=user(doc("note")))
        assert r.status_code == 200, r.text
        assert files.calls[-1][2] is False


def documented_reader() -> types.ModuleType:
    """The example plugin of docs/plugins.md's "Reading documents in chat", as written."""
    section = DOC.read_text().split("## Reading documents in chat", 1)[1]
    code = re.search(r"```python\n(?P<body>.*?)```", section, re.DOTALL)
    assert code is not None
    module = types.ModuleType("documented_file_reader")
    exec(compile(code["body"], str(DOC), "exec"), module.__dict__)
    return module


async def test_the_documented_example_plugin_works() -> None:
    fake = FakeBackendPlugin()
    async with app_client(make_app([fake, "tool-parsers", documented_reader()])) as client:
        inline = {"file_data": "data:text/plain;base64," + base64.b64encode(b"hello").decode(), "filename": "a.txt"}
        r = await client.post(CHAT, json=user(text("Read: "), {"type": "file", "file": inline}))
        assert r.status_code == 200, r.text
        assert fake.backend.models[0].last_prompt == "user: Read: hello\nassistant: "
        long = {"file_data": base64.b64encode(b"x" * (4 * CONTEXT + 1)).decode()}
        r = await client.post(CHAT, json=user({"type": "file", "file": long}))
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages[0].content[0].file"
        r = await client.post(CHAT, json=user({"type": "file", "file": {"file_id": "file-x"}}))
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_file"
