"""The plugin's ``flexserv_expand_file_parts`` (:mod:`flexserv_ocr.chat`) in a chat
request: each document's text (and, for a model that takes images, its page images)
in place of the file part, set off by blank lines, within the request's character and
page-image budgets. Reading itself is faked here (``read_document``, whose reading is
tested in ``test_document_text.py`` and ``test_page_image_reading.py``); the model is
the core's fake (rendering an image as ``<image WxH>``)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from flexserv_ocr import chat
from flexserv_ocr.errors import TooManyPageImages
from flexserv_ocr.reader import ReadAllowance
from PIL import Image

from flexserv_core import NotFound
from flexserv_core.testing import FakeBackendPlugin, app_client, make_app

CHAT = "/v1/chat/completions"
CONTEXT = 4096  # FakeTextModel's context_length
LIMIT = CONTEXT * chat.CHARS_PER_TOKEN
DOCS = {"file-a": "--- page 1 of 1 ---\nInvoice 2026 total 42.50", "file-b": "--- page 1 of 1 ---\nsecond"}


def png(size: tuple[int, int] = (40, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 10, 10)).save(buffer, "PNG")
    return buffer.getvalue()


class Reader:
    """Reads ``file_id`` s: :data:`DOCS`; ``scan-N``: N scanned pages (page images when
    allowed, else "(ocr)" text); ``file-huge``: more than it was allowed."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, Any], str, int, int | None]] = []
        self.requests: list[Any] = []
        self.allowances: list[ReadAllowance] = []  # one per request, shared by its documents

    async def __call__(
        self,
        request: Any,
        file: dict[str, Any],
        *,
        param: str,
        max_chars: int,
        max_images: int | None,
        allowance: ReadAllowance,
    ) -> str | list[str | bytes]:
        self.calls.append((file, param, max_chars, max_images))
        self.requests.append(request)
        self.allowances.append(allowance)
        name = file.get("file_id") or ""
        if name == "file-huge":
            return "x" * (max_chars + 1)
        if name.startswith("scan-"):
            count = int(name.split("-")[1])
            if max_images is None:
                return "\n".join(f"--- page {n} of {count} ---\n(ocr)" for n in range(1, count + 1))
            if count > max_images:
                raise TooManyPageImages(count, param=param)
            parts: list[str | bytes] = []
            for n in range(1, count + 1):
                parts += [("\n" if n > 1 else "") + f"--- page {n} of {count} ---\n", png()]
            return parts
        if name not in DOCS:
            raise NotFound("No such file.", param=f"{param}.file_id", code="file_not_found")
        return DOCS[name]


def user(*parts: dict[str, Any], **body: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": list(parts)}], "max_tokens": 2, **body}


def doc(file_id: str) -> dict[str, Any]:
    return {"type": "file", "file": {"file_id": file_id}}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def image() -> dict[str, Any]:
    import base64

    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png()).decode()}}


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> FakeBackendPlugin:
    """The fake model: text only, or (tests marked :data:`VLM`) 4 images per request."""
    return FakeBackendPlugin(max_images=getattr(request, "param", 0))


VLM = pytest.mark.parametrize("fake", [4], indirect=True)


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> Reader:
    reader = Reader()
    monkeypatch.setattr(chat, "read_document", reader)
    return reader


@pytest.fixture
def flexserv_plugins(fake: FakeBackendPlugin, reader: Reader) -> list[object | str]:
    return [fake, "tool-parsers", "image-input", "ocr", "tokenize"]


@pytest.fixture
def flexserv_settings() -> dict[str, Any]:
    return {"max_document_page_images": 3}  # the setting's earlier name, still accepted


async def test_the_document_text_goes_into_the_prompt(
    flexserv_client: Any, fake: FakeBackendPlugin, reader: Reader
) -> None:
    body = user(text("Sum up:"), doc("file-a"), text("Be brief."), max_tokens=3)
    r = await flexserv_client.post(CHAT, json=body)
    assert r.status_code == 200, r.text
    model = fake.backend.models[0]
    assert model.last_prompt == f"user: Sum up:\n\n{DOCS['file-a']}\n\nBe brief.\nassistant: "
    assert r.json()["usage"]["prompt_tokens"] == len(model.last_prompt)  # one token a character
    file, param, max_chars, max_images = reader.calls[0]
    assert file == {"file_id": "file-a", "file_data": None, "filename": None}
    assert param == "messages[0].content[1].file" and max_chars == LIMIT and max_images is None
    assert reader.requests[0] is not None  # read as the HTTP request's API key
    # /tokenize counts the prompt chat renders, document included
    count = await flexserv_client.post("/tokenize", json={"messages": body["messages"]})
    assert count.status_code == 200 and count.json()["count"] == len(model.last_prompt)


async def test_documents_share_the_context_and_stream(
    flexserv_client: Any, fake: FakeBackendPlugin, reader: Reader
) -> None:
    r = await flexserv_client.post(CHAT, json=user(doc("file-a"), doc("file-b"), stream=True))
    assert r.status_code == 200 and "data: [DONE]" in r.text
    assert fake.backend.models[0].last_prompt == f"user: {DOCS['file-a']}\n\n{DOCS['file-b']}\nassistant: "
    assert [max_chars for _, _, max_chars, _ in reader.calls] == [LIMIT, LIMIT - len(DOCS["file-a"])]
    assert reader.allowances[0] is reader.allowances[1]  # pages and OCR time: the request's, not each document's


@pytest.mark.parametrize(
    ("parts", "status", "code", "param"),
    [
        ([doc("file-huge")], 400, "context_length_exceeded", "messages[0].content[0].file"),
        ([text("x"), doc("nope")], 404, "file_not_found", "messages[0].content[1].file.file_id"),
        ([{"type": "file"}], 400, "missing_required_parameter", "messages[0].content[0].file"),
    ],
)
async def test_refusals(
    flexserv_client: Any, reader: Reader, parts: list[dict[str, Any]], status: int, code: str, param: str
) -> None:
    r = await flexserv_client.post(CHAT, json=user(*parts))
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == (code, param)
    if code == "context_length_exceeded":
        assert str(LIMIT) in error["message"] and str(CONTEXT) in error["message"]


async def test_a_file_part_in_a_system_message_is_refused_before_it_is_read(
    flexserv_client: Any, reader: Reader
) -> None:
    r = await flexserv_client.post(CHAT, json={"messages": [{"role": "system", "content": [doc("file-a")]}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[0].content[0].type"
    assert reader.calls == []


async def test_a_text_only_model_gets_text(flexserv_client: Any, fake: FakeBackendPlugin, reader: Reader) -> None:
    r = await flexserv_client.post(CHAT, json=user(text("Read:"), doc("scan-2")))
    assert r.status_code == 200, r.text
    assert fake.backend.models[0].last_prompt.startswith("user: Read:\n\n--- page 1 of 2 ---\n(ocr)\n--- page 2")
    assert [max_images for *_, max_images in reader.calls] == [None]


@VLM
async def test_page_images_go_in_place(flexserv_client: Any, fake: FakeBackendPlugin, reader: Reader) -> None:
    r = await flexserv_client.post(CHAT, json=user(text("Read:"), doc("scan-2"), text("Done.")))
    assert r.status_code == 200, r.text
    assert fake.backend.models[0].last_prompt == (
        "user: Read:\n\n--- page 1 of 2 ---\n<image 40x30>\n--- page 2 of 2 ---\n<image 40x30>Done.\nassistant: "
    )
    # one image part leaves the model 3 of its 4, and the setting's 3 bound it too
    r = await flexserv_client.post(CHAT, json=user(image(), doc("scan-1")))
    assert r.status_code == 200, r.text
    assert [max_images for *_, max_images in reader.calls] == [3, 3]
    # /tokenize takes no images: documents are read as text there
    r = await flexserv_client.post("/tokenize", json={"messages": user(doc("scan-1"))["messages"]})
    assert r.status_code == 200 and reader.calls[-1][3] is None


@pytest.mark.parametrize(
    ("parts", "names"),
    [
        ([doc("scan-4")], ["4 pages without a text layer", "at most 3 per request (--ocr-max-page-images)"]),
        ([doc("scan-2"), doc("scan-2")], ["4 pages without a text layer", "--ocr-max-page-images"]),
        (
            [image(), image(), doc("scan-3")],
            ["3 pages", "'fake-model' takes at most 4 images per request, 2 of them taken by the request's image"],
        ),
    ],
)
@VLM
async def test_too_many_page_images(
    flexserv_client: Any, fake: FakeBackendPlugin, reader: Reader, parts: list[dict[str, Any]], names: list[str]
) -> None:
    r = await flexserv_client.post(CHAT, json=user(*parts))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "too_many_page_images" and error["param"] == f"messages[0].content[{len(parts) - 1}].file"
    for name in names:
        assert name in error["message"]
    assert fake.backend.models[0].requests == []  # nothing was generated


@pytest.mark.parametrize(
    ("plugins", "settings"),
    [(["tool-parsers"], {}), (["tool-parsers", "image-input"], {"ocr_max_page_images": 0})],
    ids=["without-image-input", "setting-0"],
)
async def test_a_vlm_gets_text_without_the_image_plugin_or_with_the_setting_0(
    reader: Reader, plugins: list[str], settings: dict[str, Any]
) -> None:
    fake = FakeBackendPlugin(max_images=4)
    async with app_client(make_app([fake, *plugins, "ocr"], settings=settings)) as client:
        r = await client.post(CHAT, json=user(doc("scan-1")))
        assert r.status_code == 200, r.text
        assert fake.backend.models[0].last_prompt == "user: --- page 1 of 1 ---\n(ocr)\nassistant: "
        assert [max_images for *_, max_images in reader.calls] == [None]


async def test_blocked_with_p_no_ocr_a_file_part_is_a_400_naming_it() -> None:
    async with app_client(make_app([FakeBackendPlugin(), "tool-parsers", "responses", "ocr"], block=["ocr"])) as client:
        r = await client.post(CHAT, json=user(text("Sum up:"), doc("file-a")))
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert (error["code"], error["param"]) == ("document_input_unavailable", "messages[0].content[1]")
        assert "'ocr' plugin" in error["message"] and "-p no:ocr" in error["message"]
        content = [{"type": "input_text", "text": "Sum up:"}, {"type": "input_file", "file_id": "file-a"}]
        r = await client.post("/v1/responses", json={"input": [{"role": "user", "content": content}]})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert (error["code"], error["param"]) == ("document_input_unavailable", "input[0].content[1]")
