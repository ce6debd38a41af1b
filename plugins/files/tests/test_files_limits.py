"""Hostile uploads: too big, wrong bytes, path-like names and ids, a cut-off body. Each a 4xx, nothing kept."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from flexserv_ocr.testing import png_bytes, render_lines, text_pdf

pytestmark = pytest.mark.asyncio(loop_scope="module")
LIMIT = 50_000


@pytest.fixture(scope="module")
def files_settings() -> dict[str, Any]:
    return {"files_max_bytes": LIMIT, "files_max_count": 3, "files_max_total_bytes": 120_000}


async def upload(client: Any, name: str, data: bytes, purpose: str = "user_data") -> httpx.Response:
    response: httpx.Response = await client.post(
        "/v1/files", files={"file": (name, data, "application/octet-stream")}, data={"purpose": purpose}
    )
    return response


def error_of(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    return error


async def listed(client: Any) -> list[str]:
    return [f["id"] for f in (await client.get("/v1/files")).json()["data"]]


async def test_too_large_names_the_limit_and_keeps_nothing(client: Any, stored_files: Callable[[], list[Path]]) -> None:
    before = stored_files()
    error = error_of(await upload(client, "big.txt", b"a" * (LIMIT + 1)), 413, "file_too_large")
    assert str(LIMIT) in error["message"] and "--files-max-bytes" in error["message"]
    assert await listed(client) == [] and stored_files() == before


@pytest.mark.parametrize(
    ("name", "data", "purpose"),
    [
        ("invoice.pdf", b"\x7fELF\x02\x01\x01" + bytes(200), "user_data"),  # a binary named like a PDF
        ("notes.txt", "caf\u00e9".encode("latin-1") + b"\x00\x01", "user_data"),  # not UTF-8 text
        ("photo.png", b"just some text, not an image", "vision"),  # vision takes images only
        ("data.jsonl", png_bytes(render_lines(["x"])), "batch"),  # batch takes text only
    ],
)
async def test_content_is_checked_by_its_bytes(
    client: Any, stored_files: Callable[[], list[Path]], name: str, data: bytes, purpose: str
) -> None:
    error_of(await upload(client, name, data, purpose), 400, "unsupported_file_type")
    assert await listed(client) == [] and stored_files() == []


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "..", "a\\b.pdf", "C:\\Windows\\evil.pdf"])
async def test_path_like_filenames_are_refused(client: Any, stored_files: Callable[[], list[Path]], name: str) -> None:
    error_of(await upload(client, name, text_pdf([["x"]])), 400, "invalid_filename")
    assert await listed(client) == [] and stored_files() == []


def raw_upload(disposition: bytes) -> bytes:
    """A form with a ``purpose`` and a file part whose Content-Disposition parameters are these bytes."""
    return (
        b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n'
        b'--b\r\nContent-Disposition: form-data; name="file"; ' + disposition + b"\r\n\r\nhello\r\n--b--\r\n"
    )


@pytest.mark.parametrize(
    ("disposition", "name"),
    [
        ('filename="résumé.txt"'.encode(), "résumé.txt"),  # UTF-8, as browsers, curl and httpx send it
        (b"filename*=UTF-8''r%C3%A9sum%C3%A9.txt", "résumé.txt"),  # RFC 5987
        ('filename="café.txt"'.encode("latin-1"), "café.txt"),  # not UTF-8: read as Latin-1
    ],
    ids=["utf-8", "rfc-5987", "latin-1"],
)
async def test_filenames_are_decoded_as_sent(client: Any, disposition: bytes, name: str) -> None:
    headers = {"Content-Type": "multipart/form-data; boundary=b"}
    response = await client.post("/v1/files", content=raw_upload(disposition), headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["filename"] == name
    assert (await client.delete(f"/v1/files/{response.json()['id']}")).status_code == 200


@pytest.mark.parametrize(
    "disposition",
    [
        'filename="a\u0085b.txt"'.encode(),  # a C1 control character, in UTF-8
        b'filename="a\x85b.txt"',  # a stray byte that Latin-1 makes one
        b"filename*=UTF-8''a%C2%9Bb.txt",  # RFC 5987
    ],
    ids=["utf-8", "latin-1", "rfc-5987"],
)
async def test_control_characters_are_refused_after_decoding(client: Any, disposition: bytes) -> None:
    headers = {"Content-Type": "multipart/form-data; boundary=b"}
    response = await client.post("/v1/files", content=raw_upload(disposition), headers=headers)
    error_of(response, 400, "invalid_filename")
    assert await listed(client) == []


@pytest.mark.parametrize("file_id", ["..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", "file-..", "file-" + "0" * 31 + "g"])
async def test_path_like_ids_are_refused_everywhere(client: Any, file_id: str) -> None:
    # an id with a slash in it matches no route at all (404 from the router); any other is checked
    expected = (404, "not_found") if "%2F" in file_id else (400, "invalid_file_id")
    error_of(await client.get(f"/v1/files/{file_id}"), *expected)
    error_of(await client.get(f"/v1/files/{file_id}/content"), *expected)
    error_of(await client.delete(f"/v1/files/{file_id}"), *expected)
    decoded = file_id.replace("%2F", "/")
    error_of(await client.post("/v1/ocr", json={"file_id": decoded}), 400, "invalid_file_id")
    error_of(await client.get("/v1/files", params={"after": decoded}), 400, "invalid_file_id")


async def test_unknown_purpose_and_missing_parts(client: Any) -> None:
    response = await upload(client, "a.txt", b"hello", purpose="secrets")
    assert response.status_code == 400 and response.json()["error"]["param"] == "purpose"
    response = await client.post("/v1/files", files={"file": ("a.txt", b"hello")})
    error_of(response, 400, "missing_purpose")
    response = await client.post("/v1/files", data={"purpose": "user_data"}, files={"other": ("a.txt", b"x")})
    assert response.status_code == 400
    response = await client.post("/v1/files", json={"purpose": "user_data"})
    error_of(response, 400, "invalid_multipart")


async def test_count_and_total_bytes_are_bounded(client: Any) -> None:
    ids = []
    for i in range(3):
        response = await upload(client, f"part{i}.txt", b"x" * 30_000)
        assert response.status_code == 200, response.text
        ids.append(response.json()["id"])
    full = await upload(client, "one-more.txt", b"y" * 10)
    assert full.status_code == 429 and full.json()["error"]["code"] == "storage_quota_exceeded"
    for file_id in ids:
        assert (await client.delete(f"/v1/files/{file_id}")).status_code == 200
    assert (await upload(client, "fits.txt", b"y" * 10)).status_code == 200
