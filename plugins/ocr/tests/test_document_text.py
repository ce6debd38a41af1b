"""``document_text``: what chat/Responses ``file`` parts will call, through a route of a test plugin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flexserv_ocr.documents import document_text
from flexserv_ocr.testing import INVOICE_LINES, data_url, image_pdf, render_lines, text_pdf
from litestar import Request, post

from flexserv_core import hookimpl
from flexserv_core.testing import app_client, make_app, openai_client

pytestmark = pytest.mark.slow


@post("/test/document-text", opt={"scope": "inference"})
async def document_text_route(request: Request[Any, Any, Any]) -> dict[str, Any]:
    body = await request.json()
    return {"text": await document_text(request, body["file"], max_chars=body["max_chars"])}


class DocumentTextPlugin:
    @hookimpl
    def flexserv_register_routes(self, settings: Any) -> list[Any]:
        return [document_text_route]


@pytest.mark.asyncio
async def test_pages_are_marked_bounded_and_owned(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("alice inference\nbob inference\n")  # an operations key would read alice's files
    app = make_app(
        ["ocr", "files", "state-sqlite", DocumentTextPlugin()],
        settings={"state_url": f"sqlite:///{tmp_path / 'state.db'}", "api_keys_file": str(keys)},
    )
    pdf = text_pdf([INVOICE_LINES[:2], INVOICE_LINES[2:]])
    async with app_client(app) as http:
        alice = {"Authorization": "Bearer alice"}
        uploaded = await openai_client(http, "alice").files.create(file=("a.pdf", pdf), purpose="user_data")

        async def call(file: dict[str, Any], max_chars: int = 10_000, headers: dict[str, str] = alice) -> Any:
            return await http.post("/test/document-text", json={"file": file, "max_chars": max_chars}, headers=headers)

        by_id = (await call({"file_id": uploaded.id})).json()["text"]
        assert by_id == (
            "--- page 1 of 2 ---\n"
            + "\n".join(INVOICE_LINES[:2])
            + "\n--- page 2 of 2 ---\n"
            + "\n".join(INVOICE_LINES[2:])
        )
        inline = (await call({"file_data": data_url(pdf, "application/pdf"), "filename": "a.pdf"})).json()["text"]
        assert inline == by_id
        scanned = (await call({"file_data": data_url(image_pdf([render_lines(INVOICE_LINES[:1])]))})).json()["text"]
        assert scanned.startswith("--- page 1 of 1 ---\n") and "42.50" in scanned

        too_long = await call({"file_id": uploaded.id}, max_chars=50)
        assert too_long.status_code == 400
        assert (
            too_long.json()["error"]["code"] == "context_length_exceeded"
            and "50" in too_long.json()["error"]["message"]
        )
        others = await call({"file_id": uploaded.id}, headers={"Authorization": "Bearer bob"})
        assert others.status_code == 404 and others.json()["error"]["code"] == "file_not_found"
        neither = await call({})
        assert neither.status_code == 400 and neither.json()["error"]["param"] == "file"
