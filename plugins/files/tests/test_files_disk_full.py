"""An upload the server's disk cannot hold (a full disk, here a file size limit) is a
503 ``state_unavailable`` that keeps nothing, and the next upload that fits is stored."""

from __future__ import annotations

from pathlib import Path

from flexserv_core.testing import app_client, file_size_limit, make_app

LIMIT = 256 * 1024


async def test_an_upload_the_disk_cannot_hold_is_a_503_that_keeps_nothing(tmp_path: Path) -> None:
    app = make_app(
        ["files", "state-sqlite"],
        settings={"state_url": f"sqlite://{tmp_path / 'state.db'}", "cache_dir": str(tmp_path / "cache")},
    )
    big = b"a,b\n" + b"1,2\n" * LIMIT  # four times the limit
    async with app_client(app) as client:
        with file_size_limit(LIMIT):
            answer = await client.post("/v1/files", files={"file": ("big.csv", big)}, data={"purpose": "user_data"})
        assert answer.status_code == 503, answer.text
        error = answer.json()["error"]
        assert error["code"] == "state_unavailable" and error["type"] == "server_error", error
        assert "File too large" in error["message"]
        assert (await client.get("/v1/files")).json()["data"] == []
        assert list((tmp_path / "state.db.blobs").iterdir()) == []
        ok = await client.post("/v1/files", files={"file": ("big.csv", big)}, data={"purpose": "user_data"})
        assert ok.status_code == 200, ok.text
