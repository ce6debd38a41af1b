"""Stored models: restart round trip, refusal of edited, pickle-bearing and foreign files, safe ids, fit racing score."""

from __future__ import annotations

import io
import json
import pickle
import struct
import threading
from pathlib import Path

import numpy as np
import pytest
from flexserv_anomaly import codec
from flexserv_anomaly.store import MAGIC
from synthetic import blobs

from conftest import Serve, error, fit, score


def _file(tmp_path: Path, name: str) -> Path:
    return tmp_path / "anomaly" / f"{name}.fsad"


def _split(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (length,) = struct.unpack(">Q", raw[len(MAGIC) : len(MAGIC) + 8])
    start = len(MAGIC) + 8
    return json.loads(raw[start : start + length]), raw[start + length :]


def _write(path: Path, header: dict, blob: bytes) -> None:
    head = json.dumps(header).encode()
    path.write_bytes(MAGIC + struct.pack(">Q", len(head)) + head + blob)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["isolation_forest", "local_outlier_factor", "one_class_svm", "robust_zscore"])
def test_scores_are_equal_after_a_restart(serve: Serve, backend: str) -> None:
    train, _ = blobs(n=300, outliers=15, seed=5)
    probe, _ = blobs(n=50, outliers=10, seed=6)
    with serve() as client:
        fit(client, model="kept", backend=backend, data=train.tolist())
        before = score(client, model="kept", data=probe.tolist())
    with serve() as client:  # a new server process state on the same store
        assert client.get("/v1/anomaly/models").json()["data"][0]["state"] == "unloaded"
        after = score(client, model="kept", data=probe.tolist())
    assert after["data"] == before["data"]
    assert after["summary"] == before["summary"]


@pytest.mark.slow
def test_edited_pickled_and_foreign_files_are_refused_and_nothing_else_is_affected(
    serve: Serve, tmp_path: Path
) -> None:
    train, _ = blobs(n=200, outliers=10, seed=7)
    probe = train[:5].tolist()
    with serve() as client:
        for name in ("good", "edited", "pickled", "foreign", "truncated"):
            fit(client, model=name, data=train.tolist())
        expected = score(client, model="good", data=probe)
    header, blob = _split(_file(tmp_path, "edited"))
    header["contamination"] = 0.3  # an edit that changes the threshold
    _write(_file(tmp_path, "edited"), header, blob)
    # An NPZ whose arrays hold a pickled object, with a *valid* checksum: allow_pickle=False still refuses it.
    header, _ = _split(_file(tmp_path, "pickled"))
    evil = io.BytesIO()
    arrays = {k: np.zeros(header["arrays"][k]) for k in ("center", "scale", "fingerprint")}
    np.savez(evil, train=np.array([object()], dtype=object), **arrays)
    header["checksum"] = codec.checksum(header, evil.getvalue())
    _write(_file(tmp_path, "pickled"), header, evil.getvalue())
    _file(tmp_path, "foreign").write_bytes(pickle.dumps({"detector": "IsolationForest"}))  # a joblib-style file
    path = _file(tmp_path, "truncated")
    path.write_bytes(path.read_bytes()[:-100])
    with serve() as client:
        reasons = {}
        for name in ("edited", "pickled", "foreign", "truncated"):
            body = error(client.post("/v1/anomaly/score", json={"model": name, "data": probe}), 409)
            assert body["code"] == "anomaly_model_corrupt" and body["param"] == "model"
            reasons[name] = body["message"]
        assert "checksum does not match" in reasons["edited"]
        assert "pickled Python objects" in reasons["pickled"]
        assert "signature" in reasons["foreign"]
        assert "checksum does not match" in reasons["truncated"]
        assert score(client, model="good", data=probe)["data"] == expected["data"]
        listed = {m["model"]: m for m in client.get("/v1/anomaly/models").json()["data"]}
        assert listed["foreign"]["error"] and listed["good"]["error"] is None
        fit(client, model="edited", data=train.tolist())  # a refit replaces a refused file
        assert score(client, model="edited", data=probe)["data"] == expected["data"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["../escape", "..", "a/b", "a\\b", ".hidden", "x" * 200, "a..b", "%2e%2e", "name with space", ""]
)
def test_unsafe_model_names_are_refused(serve: Serve, tmp_path: Path, name: str) -> None:
    with serve() as client:
        response = client.post("/v1/anomaly/fit", json={"model": name, "data": [[1], [2], [3]]})
        assert error(response, 400)["param"] == "model"
        response = client.post("/v1/anomaly/score", json={"model": name, "data": [[1]]})
        assert response.status_code in (400, 404)
    assert not (tmp_path / "escape.fsad").exists()
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []


@pytest.mark.slow
def test_traversal_in_the_path_of_get_and_delete_is_refused(serve: Serve) -> None:
    with serve() as client:
        for method in ("GET", "DELETE"):
            response = client.request(method, "/v1/anomaly/models/..%2F..%2Fetc%2Fpasswd")
            assert response.status_code in (400, 404), response.text
            response = client.request(method, "/v1/anomaly/models/%2E%2E")
            assert error(response, 400)["param"] == "name"


@pytest.mark.slow
def test_concurrent_fits_and_scores_of_one_name_see_a_whole_model(serve: Serve) -> None:
    """Two models of one name, refitted in turn while clients score: every answer is
    exactly one of the two models' answers."""
    a, _ = blobs(n=300, outliers=10, seed=8)
    b = a * 3.0 + 5.0
    probe = a[:20].tolist()
    with serve() as client:
        fit(client, model="a-only", data=a.tolist())
        fit(client, model="b-only", data=b.tolist())
        answers = {
            "a": [d["raw_score"] for d in score(client, model="a-only", data=probe)["data"]],
            "b": [d["raw_score"] for d in score(client, model="b-only", data=probe)["data"]],
        }
        fit(client, model="shared", data=a.tolist())
        seen: list[list[float]] = []
        stop = threading.Event()

        def scorer() -> None:
            while not stop.is_set():
                seen.append([d["raw_score"] for d in score(client, model="shared", data=probe)["data"]])

        threads = [threading.Thread(target=scorer) for _ in range(3)]
        for t in threads:
            t.start()
        for i in range(6):
            fit(client, model="shared", data=(b if i % 2 == 0 else a).tolist())
        stop.set()
        for t in threads:
            t.join()
    assert len(seen) > 6
    assert all(s in (answers["a"], answers["b"]) for s in seen)
    assert answers["b"] in seen
