"""The Files API through the official SDK: upload, list, retrieve, content, delete, and OCR by id."""

from __future__ import annotations

import io
from typing import Any

import openai
import pytest
from flexserv_ocr.testing import INVOICE_LINES, image_pdf, png_bytes, render_lines, text_pdf

from flexserv_core.testing import openai_client

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def sdk(files_app: Any, client: Any) -> openai.AsyncOpenAI:
    return openai_client(client)


async def test_upload_list_retrieve_content_delete(sdk: openai.AsyncOpenAI) -> None:
    pdf = text_pdf([INVOICE_LINES])
    created = await sdk.files.create(file=("invoice.pdf", pdf, "application/pdf"), purpose="user_data")
    assert created.id.startswith("file-") and created.bytes == len(pdf)
    assert created.filename == "invoice.pdf" and created.purpose == "user_data" and created.status == "processed"
    assert created.expires_at is not None and created.expires_at > created.created_at

    listed = await sdk.files.list()
    assert created.id in [f.id for f in listed.data]
    only_batch = await sdk.files.list(purpose="batch")
    assert created.id not in [f.id for f in only_batch.data]

    retrieved = await sdk.files.retrieve(created.id)
    assert retrieved.model_dump() == created.model_dump()

    content = await sdk.files.content(created.id)
    assert content.read() == pdf
    assert content.response.headers["content-type"] == "application/pdf"

    deleted = await sdk.files.delete(created.id)
    assert deleted.deleted and deleted.id == created.id
    with pytest.raises(openai.NotFoundError):
        await sdk.files.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        await sdk.files.delete(created.id)


@pytest.mark.slow
async def test_ocr_by_file_id(sdk: openai.AsyncOpenAI, client: Any) -> None:
    scan = image_pdf([render_lines(INVOICE_LINES, size=32)])
    scan_file = await sdk.files.create(file=("scan.pdf", scan), purpose="user_data")
    text_file = await sdk.files.create(file=("text.pdf", text_pdf([INVOICE_LINES])), purpose="user_data")
    image_file = await sdk.files.create(file=("page.png", png_bytes(render_lines(INVOICE_LINES[:1]))), purpose="vision")

    body = (await client.post("/v1/ocr", json={"file_id": scan_file.id})).json()
    assert body["data"][0]["pages"][0]["source"] == "ocr"
    assert "42.50" in body["data"][0]["text"] and "INV-0042" in body["data"][0]["text"]
    body = (await client.post("/v1/ocr", json={"file_id": text_file.id})).json()
    assert body["data"][0]["text"] == "\n".join(INVOICE_LINES)
    body = (await client.post("/v1/ocr", json={"file_id": image_file.id})).json()
    assert "Invoice 2026" in body["data"][0]["text"]

    await sdk.files.delete(scan_file.id)
    gone = await client.post("/v1/ocr", json={"file_id": scan_file.id})
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "file_not_found"


async def test_text_files_and_jsonl_for_batch(sdk: openai.AsyncOpenAI) -> None:
    lines = b'{"custom_id": "1"}\n{"custom_id": "2"}\n'
    created = await sdk.files.create(file=("requests.jsonl", lines), purpose="batch")
    assert (await sdk.files.content(created.id)).read() == lines
    await sdk.files.delete(created.id)


@pytest.mark.parametrize("name", ["résumé.txt", "Überweisung €.txt", "請求書.pdf"])
async def test_a_non_ascii_filename_is_kept_as_sent(sdk: openai.AsyncOpenAI, name: str) -> None:
    """The SDK (httpx) writes the filename's UTF-8 bytes into the part header, as browsers and curl do."""
    created = await sdk.files.create(file=(name, io.BytesIO(b"hi"), "text/plain"), purpose="user_data")
    assert created.filename == name
    assert (await sdk.files.retrieve(created.id)).filename == name
    await sdk.files.delete(created.id)
