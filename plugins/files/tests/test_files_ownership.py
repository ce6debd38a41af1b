"""With API keys, a file exists only for the key that uploaded it and for operations
keys; files survive a restart."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from flexserv_ocr.testing import INVOICE_LINES, text_pdf

from flexserv_core.testing import app_client, make_app, openai_client


def keys_file(tmp_path: Path) -> str:
    """alice and bob may call inference routes; ops has every scope (as an ``--api-key`` has)."""
    path = tmp_path / "keys.txt"
    path.write_text("key-alice inference\nkey-bob inference\nkey-ops\n")
    return str(path)


@pytest.mark.asyncio
async def test_another_key_sees_nothing(tmp_path: Path) -> None:
    app = make_app(
        ["files", "ocr", "state-sqlite"],
        settings={"state_url": f"sqlite:///{tmp_path / 'state.db'}", "api_keys_file": keys_file(tmp_path)},
    )
    async with app_client(app) as http:
        alice, bob = openai_client(http, "key-alice"), openai_client(http, "key-bob")
        created = await alice.files.create(file=("a.pdf", text_pdf([INVOICE_LINES])), purpose="user_data")
        assert [f.id for f in (await alice.files.list()).data] == [created.id]
        assert (await bob.files.list()).data == []
        for call in (bob.files.retrieve, bob.files.content, bob.files.delete):
            with pytest.raises(openai.NotFoundError):
                await call(created.id)
        ocr = await http.post("/v1/ocr", json={"file_id": created.id}, headers={"Authorization": "Bearer key-bob"})
        assert ocr.status_code == 404 and ocr.json()["error"]["code"] == "file_not_found"
        mine = await http.post("/v1/ocr", json={"file_id": created.id}, headers={"Authorization": "Bearer key-alice"})
        assert mine.status_code == 200 and "42.50" in mine.json()["data"][0]["text"]
        unauthenticated = await http.get("/v1/files")
        assert unauthenticated.status_code == 401
        assert (await alice.files.retrieve(created.id)).id == created.id  # bob's delete did nothing


@pytest.mark.asyncio
async def test_an_operations_key_reads_and_deletes_every_keys_files(tmp_path: Path) -> None:
    app = make_app(
        ["files", "ocr", "state-sqlite"],
        settings={"state_url": f"sqlite:///{tmp_path / 'state.db'}", "api_keys_file": keys_file(tmp_path)},
    )
    pdf = text_pdf([INVOICE_LINES])
    async with app_client(app) as http:
        alice, ops = openai_client(http, "key-alice"), openai_client(http, "key-ops")
        created = await alice.files.create(file=("a.pdf", pdf), purpose="user_data")
        assert (await ops.files.retrieve(created.id)).filename == "a.pdf"
        assert (await ops.files.content(created.id)).read() == pdf
        ocr = await http.post("/v1/ocr", json={"file_id": created.id}, headers={"Authorization": "Bearer key-ops"})
        assert ocr.status_code == 200 and "42.50" in ocr.json()["data"][0]["text"]
        assert (await ops.files.list()).data == []  # the list shows a key the files it uploaded
        mine = await ops.files.create(file=("b.pdf", pdf), purpose="user_data")
        with pytest.raises(openai.NotFoundError):  # what an operations key uploads is its own
            await alice.files.retrieve(mine.id)
        assert (await ops.files.delete(created.id)).deleted
        with pytest.raises(openai.NotFoundError):
            await alice.files.retrieve(created.id)


@pytest.mark.asyncio
async def test_files_survive_a_restart(tmp_path: Path) -> None:
    settings = {"state_url": f"sqlite:///{tmp_path / 'state.db'}"}
    pdf = text_pdf([INVOICE_LINES])
    async with app_client(make_app(["files", "state-sqlite"], settings=settings)) as http:
        created = await openai_client(http).files.create(file=("keep.pdf", pdf), purpose="user_data")
    async with app_client(make_app(["files", "state-sqlite"], settings=settings)) as http:
        sdk = openai_client(http)
        assert (await sdk.files.retrieve(created.id)).filename == "keep.pdf"
        assert (await sdk.files.content(created.id)).read() == pdf
