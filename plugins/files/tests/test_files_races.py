"""One file downloaded, retrieved, read by OCR and deleted at once: each answer is the
file or a 404, never a 500, and exactly one delete wins."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROUNDS = 15
TEXT = b"id,value\n" + b"1,2\n" * 2000


async def upload(client: Any) -> str:
    r = await client.post("/v1/files", files={"file": ("a.csv", TEXT, "text/csv")}, data={"purpose": "user_data"})
    assert r.status_code == 200, r.text
    file_id: str = r.json()["id"]
    return file_id


def assert_not_found(r: Any) -> None:
    assert r.status_code == 404, r.text
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


async def test_downloads_racing_deletes_get_the_file_or_a_404(client: Any) -> None:
    for _ in range(ROUNDS):
        file_id = await upload(client)
        calls = [client.get(f"/v1/files/{file_id}/content") for _ in range(4)]
        calls += [client.get(f"/v1/files/{file_id}"), client.delete(f"/v1/files/{file_id}")]
        calls += [client.delete(f"/v1/files/{file_id}")]
        answers = await asyncio.gather(*calls)
        for r in answers[:4]:
            if r.status_code == 200:
                assert r.content == TEXT
            else:
                assert_not_found(r)
        assert answers[4].status_code in (200, 404), answers[4].text
        deletes = sorted(r.status_code for r in answers[5:])
        assert deletes == [200, 404], [r.text for r in answers[5:]]
        assert_not_found(await client.get(f"/v1/files/{file_id}/content"))


async def test_ocr_of_a_file_racing_its_delete_reads_it_or_answers_404(client: Any) -> None:
    # a CSV is no document OCR reads (400 invalid_document): what matters is that the
    # bytes were found, or that the file was gone (404), never a 500
    for _ in range(ROUNDS):
        file_id = await upload(client)
        calls = [client.post("/v1/ocr", json={"file_id": file_id}) for _ in range(4)]
        answers = await asyncio.gather(*calls, client.delete(f"/v1/files/{file_id}"))
        assert answers[-1].status_code == 200, answers[-1].text
        for r in answers[:-1]:
            if r.status_code == 400:
                assert r.json()["error"]["code"] == "invalid_document", r.text
            else:
                assert_not_found(r)
