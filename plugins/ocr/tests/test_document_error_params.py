"""A document's errors name the request field that carried it: a chat ``file`` part's
``messages[i].content[j].file`` (Responses: ``input[i].content[j].file``), whether it
came by ``file_id`` or inline, and on ``/v1/documents/extract`` its ``file_id`` or
``file_data``, never ``images`` or ``pages`` of another route. Extraction's context
overflow names ``instructions`` when they are what does not fit. The core's fake
text model (4,096 tokens of context, a token a character) stands in for a real one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from flexserv_ocr.testing import b64, data_url, many_pages_pdf, png_bomb, text_pdf
from litestar import Litestar

from flexserv_core.testing import FakeBackendPlugin, make_app, running_app_client

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: ``(bytes, status, code)``: a document each error of reading it.
DOCUMENTS = {
    "truncated-png": (b"\x89PNG\r\n\x1a\n garbage", 400, "invalid_document"),
    "png-bomb": (png_bomb(100_000, 100_000), 413, "too_many_pixels"),
    "fake-pdf": (b"%PDF-1.4\n garbage", 400, "invalid_document"),
    "too-many-pages": (many_pages_pdf(51), 400, "too_many_pages"),  # over --ocr-max-pages, no 'pages' to select
}
SCHEMA = {"type": "object", "properties": {"total": {"type": "string"}}}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Litestar:
    state: Path = tmp_path_factory.mktemp("state") / "state.db"
    plugins: list[object | str] = [FakeBackendPlugin(), "tool-parsers", "responses", "ocr", "files", "state-sqlite"]
    return make_app(plugins, settings={"state_url": f"sqlite:///{state}"})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(app: Litestar) -> AsyncIterator[Any]:
    async with running_app_client(app) as c:
        yield c


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def uploaded(client: Any) -> dict[str, str]:
    """Each of :data:`DOCUMENTS` uploaded to ``/v1/files``: name -> file id."""
    ids = {}
    for name, (data, _, _) in DOCUMENTS.items():
        response = await client.post("/v1/files", files={"file": (name, data)}, data={"purpose": "user_data"})
        assert response.status_code == 200, response.text
        ids[name] = response.json()["id"]
    return ids


def error_of(response: Any, status: int, code: str, param: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert (error["code"], error["param"]) == (code, param), error
    return error


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
@pytest.mark.parametrize("by", ["file_id", "file_data"])
async def test_a_chat_file_part_error_names_the_part(client: Any, uploaded: dict[str, str], name: str, by: str) -> None:
    data, status, code = DOCUMENTS[name]
    file = {"file_id": uploaded[name]} if by == "file_id" else {"file_data": data_url(data, "application/pdf")}
    content = [{"type": "text", "text": "Sum up:"}, {"type": "file", "file": file}]
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 2}
    response = await client.post("/v1/chat/completions", json=body)
    error = error_of(response, status, code, "messages[0].content[1].file")
    assert "'images" not in error["message"] and "'pages'" not in error["message"]


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
async def test_a_responses_input_file_error_names_the_part(client: Any, uploaded: dict[str, str], name: str) -> None:
    _, status, code = DOCUMENTS[name]
    content = [{"type": "input_text", "text": "Sum up:"}, {"type": "input_file", "file_id": uploaded[name]}]
    response = await client.post("/v1/responses", json={"input": [{"role": "user", "content": content}]})
    error_of(response, status, code, "input[0].content[1].file")


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
async def test_an_extraction_names_the_field_that_carried_the_document(
    client: Any, uploaded: dict[str, str], name: str
) -> None:
    data, status, code = DOCUMENTS[name]
    by_id = await client.post("/v1/documents/extract", json={"file_id": uploaded[name], "schema": SCHEMA})
    error_of(by_id, status, code, "file_id")
    inline = await client.post("/v1/documents/extract", json={"file_data": b64(data), "schema": SCHEMA})
    error_of(inline, status, code, "file_data")


async def test_an_extraction_of_a_file_that_is_not_there_names_file_id(client: Any) -> None:
    response = await client.post("/v1/documents/extract", json={"file_id": "file-" + "0" * 32, "schema": SCHEMA})
    error_of(response, 404, "file_not_found", "file_id")


async def test_instructions_that_overflow_the_context_are_named(client: Any) -> None:
    pdf = b64(text_pdf([["Invoice total 42.50"]]))
    body = {"file_data": pdf, "schema": SCHEMA, "instructions": "Be precise. " * 9_000}
    error = error_of(
        await client.post("/v1/documents/extract", json=body), 400, "context_length_exceeded", "instructions"
    )
    assert "'instructions'" in error["message"] and "'pages'" not in error["message"]
    # a document that does not fit is still the pages' to fix, with or without instructions
    long_pdf = b64(text_pdf([[f"Line {i} of a long report, on and on." for i in range(45)]] * 3))
    for instructions in (None, "Be precise."):
        body = {"file_data": long_pdf, "schema": SCHEMA, "instructions": instructions}
        error = error_of(await client.post("/v1/documents/extract", json=body), 400, "context_length_exceeded", "pages")
        assert "Select fewer 'pages'" in error["message"]


async def test_the_page_allowance_is_the_requests_across_its_documents(client: Any) -> None:
    """Two 30-page documents in one chat request are 60 pages: over --ocr-max-pages (50)
    in all, as one /v1/ocr request may read; the second document is named."""
    pdf = text_pdf([[f"page {n}"] for n in range(30)])
    part = {"type": "file", "file": {"file_data": data_url(pdf, "application/pdf"), "filename": "a.pdf"}}
    one = {"messages": [{"role": "user", "content": [{"type": "text", "text": "Sum up:"}, part]}], "max_tokens": 2}
    assert (await client.post("/v1/chat/completions", json=one)).status_code == 200
    two = {"messages": [{"role": "user", "content": [part, part]}], "max_tokens": 2}
    response = await client.post("/v1/chat/completions", json=two)
    error_of(response, 400, "too_many_pages", "messages[0].content[1].file")
