"""The upload's multipart reader: the file streams on as it arrives, a body cut short in
the file is ``incomplete_upload``, and the form's own bounds are ``invalid_multipart``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from flexserv_files.multipart import MAX_FIELD_BYTES, MAX_PARTS, FilePart, form_events

pytestmark = pytest.mark.asyncio(loop_scope="module")
FILE_HEAD = b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\n'
PURPOSE = b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n'


async def post(client: Any, body: bytes) -> httpx.Response:
    response: httpx.Response = await client.post(
        "/v1/files", content=body, headers={"Content-Type": "multipart/form-data; boundary=b"}
    )
    return response


async def test_the_file_streams_on_before_the_body_ends() -> None:
    pulled: list[bytes] = []

    async def body() -> AsyncIterator[bytes]:
        for chunk in (FILE_HEAD, b"x" * 1000, b"y" * 1000, b"\r\n--b--\r\n"):
            pulled.append(chunk)
            yield chunk

    events = form_events(body(), b"b")
    assert isinstance(await anext(events), FilePart)
    assert await anext(events) == b"x" * 1000
    assert len(pulled) == 2
    await events.aclose()


async def test_a_body_cut_short_in_the_file_is_an_incomplete_upload(
    client: Any, stored_files: Callable[[], list[Path]]
) -> None:
    response = await post(client, PURPOSE + FILE_HEAD + b"only the first half")
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "incomplete_upload"
    assert (await client.get("/v1/files")).json()["data"] == [] and stored_files() == []


def field(name: str, value: bytes) -> bytes:
    return f'--b\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode() + value + b"\r\n"


@pytest.mark.parametrize(
    "fields",
    [
        b"".join(field(f"f{i}", b"v") for i in range(MAX_PARTS)),
        field("purpose", b"x" * (MAX_FIELD_BYTES + 1)),
    ],
    ids=["parts", "field"],
)
async def test_the_forms_bounds_are_invalid_multipart(client: Any, fields: bytes) -> None:
    response = await post(client, fields + FILE_HEAD + b"hello\r\n--b--\r\n")
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_multipart", "file"), error
