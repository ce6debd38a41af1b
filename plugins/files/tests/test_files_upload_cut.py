"""A client that disconnects in the middle of an upload leaves nothing on disk.

A synchronous test of its own: ``test_files_limits``'s tests share a module-scoped
event loop that a blocking socket test must not be marked for."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import httpx
import pytest

from flexserv_core.testing import ServedApp, make_app, wait_until


def test_an_upload_cut_mid_way_leaves_nothing(tmp_path: Path) -> None:
    app = make_app(["files", "state-sqlite"], settings={"state_url": f"sqlite:///{tmp_path / 'state.db'}"})
    boundary = "cutcutcut"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode()
    with ServedApp(app) as base_url:
        url = httpx.URL(base_url)
        with socket.create_connection((url.host, url.port)) as sock:
            sock.sendall(
                b"POST /v1/files HTTP/1.1\r\nHost: x\r\n"
                + f"Content-Type: multipart/form-data; boundary={boundary}\r\n".encode()
                + f"Content-Length: {len(head) + 1_000_000}\r\n\r\n".encode()
                + head
                + b"z" * 300_000
            )
        # the client is gone with 700 kB unsent: the partial blob must go with it

        def leftovers() -> list[Path]:
            return [p for p in tmp_path.rglob("*") if p.is_file() and not p.name.startswith("state.db")]

        wait_until(lambda: not leftovers(), 10, message=f"left on disk: {leftovers()}")
        with httpx.Client(base_url=base_url) as http:
            assert http.get("/v1/files").json()["data"] == []
            ok = http.post("/v1/files", files={"file": ("a.txt", b"fine")}, data={"purpose": "user_data"})
            assert ok.status_code == 200  # the server is fine, and stores a whole upload


def test_without_the_state_plugin_files_are_a_clear_503(caplog: pytest.LogCaptureFixture) -> None:
    """``-p no:state``: the server starts, says at start-up that files cannot be kept, and answers 503."""
    app = make_app(["files"], block=["state"])
    with caplog.at_level(logging.WARNING), ServedApp(app) as base_url, httpx.Client(base_url=base_url) as http:
        for answer in (
            http.post("/v1/files", files={"file": ("a.txt", b"hi")}, data={"purpose": "user_data"}),
            http.get("/v1/files"),
            http.get("/v1/files/file-" + "0" * 32),
        ):
            assert answer.status_code == 503, answer.text
            error = answer.json()["error"]
            assert error["code"] == "state_unavailable" and "the 'state' plugin" in error["message"], error
    assert any("/v1/files answers 503" in r.getMessage() for r in caplog.records)
