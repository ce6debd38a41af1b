"""Hostile multipart bodies on the audio routes: each a 400 naming the part, never a 500.

The bodies are written by hand, as curl sends them: ``-F 'prompt=<bad.txt'`` (a field
that is not UTF-8), ``-F 'language=en;type=text/plain;charset=klingon'``, ``-F
'file=<tone.wav'`` (audio as a plain field, without a filename). All are refused while
the form is read, before any model is looked up, so no transcription backend is needed."""

from __future__ import annotations

from typing import Any

import pytest

from flexserv_core.testing import app_client, make_app

ROUTES = ["/v1/audio/transcriptions", "/v1/audio/translations"]
BOUNDARY = "audio-form-boundary-3f9e"
WAV = b"RIFF\x24\x08\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x80\x3e\x00\x00" + bytes(range(256)) * 8
FILE = ('name="file"; filename="tone.wav"\r\nContent-Type: audio/wav', WAV)


def form(*parts: tuple[str, bytes]) -> bytes:
    """A multipart body: each part its Content-Disposition parameters (and any headers after them), then its bytes."""
    body = b""
    for headers, data in parts:
        body += f"--{BOUNDARY}\r\nContent-Disposition: form-data; {headers}\r\n\r\n".encode() + data + b"\r\n"
    return body + f"--{BOUNDARY}--\r\n".encode()


async def post(path: str, body: bytes) -> Any:
    async with app_client(make_app(["audio"])) as client:
        headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
        return await client.post(path, content=body, headers=headers)


def error_of(response: Any, param: str, code: str) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    error: dict[str, Any] = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code), error
    return error


@pytest.mark.parametrize("path", ROUTES)
async def test_a_field_that_is_not_utf8_is_a_400_naming_it(path: str) -> None:
    error = error_of(await post(path, form(('name="prompt"', b"\xff\xfe"), FILE)), "prompt", "invalid_multipart")
    assert "'prompt'" in error["message"] and "UTF-8" in error["message"]


@pytest.mark.parametrize("path", ROUTES)
async def test_an_unknown_charset_is_a_400_naming_the_field(path: str) -> None:
    body = form(('name="language"\r\nContent-Type: text/plain;charset=klingon', b"en"), FILE)
    error = error_of(await post(path, body), "language", "invalid_multipart")
    assert "'klingon'" in error["message"]


async def test_a_field_in_the_charset_it_names_is_read_in_it() -> None:
    # the value reaches validation decoded: its error quotes it
    body = form(('name="stream"\r\nContent-Type: text/plain; charset=latin-1', "peut-être".encode("latin-1")), FILE)
    error = error_of(await post(ROUTES[0], body), "stream", "invalid_request")
    assert "'peut-être'" in error["message"]


@pytest.mark.parametrize("path", ROUTES)
async def test_audio_sent_as_a_plain_field_is_a_400_naming_file(path: str) -> None:
    error = error_of(
        await post(path, form(('name="model"', b"whisper-1"), ('name="file"', WAV))), "file", "invalid_request"
    )
    assert "filename" in error["message"] and "file=@" in error["message"]


@pytest.mark.parametrize("path", ROUTES)
async def test_a_filename_too_long_says_so(path: str) -> None:
    long_name = 'name="file"; filename="' + "a" * 5000 + '.wav"\r\nContent-Type: audio/wav'
    error = error_of(await post(path, form((long_name, WAV))), "file", "invalid_multipart")
    assert "Entity Too Large" not in error["message"]
    assert "filename" in error["message"] and "4096 bytes" in error["message"]


@pytest.mark.parametrize("path", ROUTES)
async def test_a_malformed_body_is_invalid_multipart(path: str) -> None:
    error = error_of(await post(path, f"--{BOUNDARY}\r\nnonsense\r\n\r\n".encode()), "file", "invalid_multipart")
    assert "could not be parsed" in error["message"]
