"""An upload's form parts may come in any order: ``purpose`` and ``expires_after``
after the file are read as well as before it, the size bound still holds while the
file streams, and a refused upload leaves nothing on disk."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from flexserv_ocr.testing import INVOICE_LINES, text_pdf

pytestmark = pytest.mark.asyncio(loop_scope="module")
LIMIT = 50_000
BOUNDARY = "form-order-boundary-7c1f"
PDF = text_pdf([INVOICE_LINES])


@pytest.fixture(scope="module")
def files_settings(state_dir: Path) -> dict[str, Any]:
    # the upload spool lives under the cache directory: put it where stored_files looks
    return {"files_max_bytes": LIMIT, "cache_dir": str(state_dir / "cache")}


def form(*parts: tuple[str, str | None, bytes]) -> bytes:
    """A multipart body with the parts in exactly this order: ``(name, filename or None, data)``."""
    body = b""
    for name, filename, data in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        headers = f"Content-Disposition: {disposition}\r\n"
        if filename is not None:
            headers += "Content-Type: application/octet-stream\r\n"
        body += f"--{BOUNDARY}\r\n{headers}\r\n".encode() + data + b"\r\n"
    return body + f"--{BOUNDARY}--\r\n".encode()


async def post(client: Any, body: bytes) -> httpx.Response:
    response: httpx.Response = await client.post(
        "/v1/files", content=body, headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    )
    return response


async def test_purpose_after_the_file(client: Any) -> None:
    response = await post(client, form(("file", "invoice.pdf", PDF), ("purpose", None, b"user_data")))
    assert response.status_code == 200, response.text
    created = response.json()
    assert (created["filename"], created["purpose"], created["bytes"]) == ("invoice.pdf", "user_data", len(PDF))
    assert (await client.get(f"/v1/files/{created['id']}/content")).content == PDF


async def test_expiry_after_the_file(client: Any) -> None:
    body = form(
        ("expires_after[anchor]", None, b"created_at"),
        ("file", "a.pdf", PDF),
        ("purpose", None, b"user_data"),
        ("expires_after[seconds]", None, b"7200"),
    )
    response = await post(client, body)
    assert response.status_code == 200, response.text
    assert response.json()["expires_at"] - response.json()["created_at"] == 7200


@pytest.mark.parametrize(
    ("parts", "status", "code"),
    [
        ((("file", "a.pdf", PDF),), 400, "missing_purpose"),
        ((("file", "a.txt", b"plain text"), ("purpose", None, b"vision")), 400, "unsupported_file_type"),
        ((("file", "big.txt", b"a" * (LIMIT + 1)), ("purpose", None, b"user_data")), 413, "file_too_large"),
        ((("file", "a.pdf", PDF), ("purpose", None, b"nonsense")), 400, "invalid_request"),
    ],
)
async def test_refused_after_the_file_keeps_nothing(
    client: Any,
    stored_files: Callable[[], list[Path]],
    parts: tuple[tuple[str, str | None, bytes], ...],
    status: int,
    code: str,
) -> None:
    before = [f["id"] for f in (await client.get("/v1/files")).json()["data"]]
    files_before = stored_files()
    response = await post(client, form(*parts))
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert [f["id"] for f in (await client.get("/v1/files")).json()["data"]] == before
    assert stored_files() == files_before
