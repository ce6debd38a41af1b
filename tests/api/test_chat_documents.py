"""Chat ``file`` content parts: the core reads each through ``flexserv_load_document``
(a plugin's), puts its text in the prompt within the model's context, and without a
plugin answers a 400 naming the one to install."""

from __future__ import annotations

from typing import Any

import pytest

from flexserv_core import NotFound, RequestContext, hookimpl
from flexserv_core.api.chat_documents import CHARS_PER_TOKEN
from flexserv_core.testing import app_client, make_app
from flexserv_core.testing.fakes import FakeBackendPlugin

CHAT = "/v1/chat/completions"
CONTEXT = 4096  # FakeTextModel's context_length
DOCS = {"file-a": "--- page 1 of 1 ---\nInvoice 2026 total 42.50", "file-b": "--- page 1 of 1 ---\nsecond"}


class DocumentPlugin:
    """Reads ``file_id`` s from :data:`DOCS`; records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, Any], str, int]] = []
        self.requests: list[Any] = []

    @hookimpl
    async def flexserv_load_document(
        self, file: dict[str, Any], param: str, max_chars: int, context: RequestContext
    ) -> str | None:
        self.calls.append((file, param, max_chars))
        self.requests.append(context.request)
        if file.get("file_id") == "file-huge":
            return "x" * (max_chars + 1)  # a plugin that ignores its bound
        if file.get("file_id") not in DOCS:
            raise NotFound("No such file.", param=f"{param}.file_id", code="file_not_found")
        return DOCS[file["file_id"]]


def file_part(file_id: str) -> dict[str, Any]:
    return {"type": "file", "file": {"file_id": file_id}}


def user(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(parts)}]


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


@pytest.mark.asyncio
async def test_without_a_document_plugin_a_file_part_names_the_plugin() -> None:
    async with app_client(make_app([FakeBackendPlugin(), "tool-parsers"])) as http:
        r = await http.post(CHAT, json={"messages": user(text("Sum up:"), file_part("file-a"))})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "document_input_unavailable" and error["param"] == "messages[0].content[1]"
        assert "'ocr' plugin" in error["message"] and "flexserv-ocr" in error["message"]
        # text-only requests are served as before
        assert (await http.post(CHAT, json={"messages": user(text("hi")), "max_tokens": 2})).status_code == 200


@pytest.fixture
def documents() -> DocumentPlugin:
    return DocumentPlugin()


@pytest.fixture
def flexserv_plugins(fake: FakeBackendPlugin, documents: DocumentPlugin) -> list[object | str]:
    return [fake, "tool-parsers", documents]


async def test_the_document_text_goes_into_the_prompt(
    flexserv_client: Any, fake: FakeBackendPlugin, documents: DocumentPlugin
) -> None:
    body = {"messages": user(text("Sum up:"), file_part("file-a"), text("Be brief.")), "max_tokens": 3}
    r = await flexserv_client.post(CHAT, json=body)
    assert r.status_code == 200, r.text
    model = fake.backend.models[0]
    assert model.last_prompt == f"user: Sum up:\n\n{DOCS['file-a']}\n\nBe brief.\nassistant: "
    assert r.json()["usage"]["prompt_tokens"] == len(model.last_prompt)  # one token a character
    file, param, max_chars = documents.calls[0]
    assert file == {"file_id": "file-a", "file_data": None, "filename": None}
    assert param == "messages[0].content[1].file" and max_chars == CONTEXT * CHARS_PER_TOKEN
    assert documents.requests[0] is not None  # the plugin sees the HTTP request (its API key)
    # /tokenize counts the prompt chat renders, document included
    count = await flexserv_client.post("/tokenize", json={"messages": body["messages"]})
    assert count.status_code == 200 and count.json()["count"] == len(model.last_prompt)


async def test_documents_share_the_context_and_stream(
    flexserv_client: Any, fake: FakeBackendPlugin, documents: DocumentPlugin
) -> None:
    body = {"messages": user(file_part("file-a"), file_part("file-b")), "max_tokens": 3, "stream": True}
    r = await flexserv_client.post(CHAT, json=body)
    assert r.status_code == 200 and "data: [DONE]" in r.text
    assert fake.backend.models[0].last_prompt == f"user: {DOCS['file-a']}\n\n{DOCS['file-b']}\nassistant: "
    limit = CONTEXT * CHARS_PER_TOKEN
    assert [max_chars for _, _, max_chars in documents.calls] == [limit, limit - len(DOCS["file-a"])]


@pytest.mark.parametrize(
    ("messages", "status", "code", "param"),
    [
        (user(file_part("file-huge")), 400, "context_length_exceeded", "messages[0].content[0].file"),
        (user(text("x"), file_part("nope")), 404, "file_not_found", "messages[0].content[1].file.file_id"),
        (user({"type": "file"}), 400, "missing_required_parameter", "messages[0].content[0].file"),
        ([{"role": "system", "content": [file_part("file-a")]}], 400, "invalid_value", "messages[0].content[0].type"),
    ],
)
async def test_refusals(
    flexserv_client: Any, messages: list[dict[str, Any]], status: int, code: str, param: str
) -> None:
    r = await flexserv_client.post(CHAT, json={"messages": messages, "max_tokens": 2})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == (code, param)
    if code == "context_length_exceeded":
        assert str(CONTEXT * CHARS_PER_TOKEN) in error["message"] and str(CONTEXT) in error["message"]


async def test_a_document_that_fits_the_characters_but_not_the_tokens(
    flexserv_client: Any, documents: DocumentPlugin
) -> None:
    DOCS["file-long"] = "y" * (CONTEXT + 10)  # the fake's tokens are characters
    try:
        r = await flexserv_client.post(CHAT, json={"messages": user(file_part("file-long")), "max_tokens": 2})
    finally:
        del DOCS["file-long"]
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert f"maximum context length is {CONTEXT} tokens" in r.json()["error"]["message"]
