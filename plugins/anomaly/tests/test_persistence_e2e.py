"""Stored models: restart round trip, refusal of edited, pickle-bearing and foreign files, safe ids, fit racing score."""

from __future__ import annotations

import io
import json
import pickle
import sqlite3
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from anomaly_client import Serve, error, fit, score
from flexserv_anomaly import codec
from synthetic import blobs


def _record(tmp_path: Path, name: str) -> tuple[dict, Path]:
    """The stored header and the blob file of model ``name`` in the default SQLite state store."""
    db = tmp_path / "state.db"
    with sqlite3.connect(db) as conn:
        payload, blob_name = conn.execute(
            "SELECT payload, blob_name FROM records WHERE collection = 'anomaly_models' AND id = ?", (name,)
        ).fetchone()
    return json.loads(payload), tmp_path / "state.db.blobs" / blob_name


def _set_header(tmp_path: Path, name: str, header: dict) -> None:
    with sqlite3.connect(tmp_path / "state.db") as conn:
        conn.execute(
            "UPDATE records SET payload = ? WHERE collection = 'anomaly_models' AND id = ?", (json.dumps(header), name)
        )


@pytest.mark.slow
def test_scores_are_equal_after_a_restart(serve: Serve) -> None:
    train, _ = blobs(n=300, outliers=15, seed=5)
    probe, _ = blobs(n=50, outliers=10, seed=6)
    backends = ["isolation_forest", "local_outlier_factor", "one_class_svm", "robust_zscore"]
    before = {}
    with serve() as client:
        for backend in backends:
            fit(client, model=backend, backend=backend, data=train.tolist())
            before[backend] = score(client, model=backend, data=probe.tolist())
    with serve() as client:  # a new server on the same store
        assert {m["state"] for m in client.get("/v1/anomaly/models").json()["data"]} == {"unloaded"}
        for backend in backends:
            after = score(client, model=backend, data=probe.tolist())
            assert after["data"] == before[backend]["data"], backend
            assert after["summary"] == before[backend]["summary"], backend


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
    header, _ = _record(tmp_path, "edited")
    _set_header(tmp_path, "edited", {**header, "contamination": 0.3})  # an edit that changes the threshold
    # An NPZ whose arrays hold a pickled object, with a *valid* checksum: allow_pickle=False still refuses it.
    header, blob_file = _record(tmp_path, "pickled")
    evil = io.BytesIO()
    arrays = {k: np.zeros(header["arrays"][k]) for k in ("center", "scale", "fingerprint")}
    np.savez(evil, train=np.array([object()], dtype=object), **arrays)
    blob_file.write_bytes(evil.getvalue())
    _set_header(tmp_path, "pickled", {**header, "checksum": codec.checksum(header, evil.getvalue())})
    # A joblib-style record: a pickled detector as the blob and a header of another program's.
    _, blob_file = _record(tmp_path, "foreign")
    blob_file.write_bytes(pickle.dumps({"detector": "IsolationForest"}))
    _set_header(tmp_path, "foreign", {"filename": "foreign_isolation_forest.joblib"})
    _, blob_file = _record(tmp_path, "truncated")
    blob_file.write_bytes(blob_file.read_bytes()[:-100])
    with serve() as client:
        reasons = {}
        for name in ("edited", "pickled", "foreign", "truncated"):
            body = error(client.post("/v1/anomaly/score", json={"model": name, "data": probe}), 409)
            assert body["code"] == "anomaly_model_corrupt" and body["param"] == "model"
            reasons[name] = body["message"]
        assert "checksum does not match" in reasons["edited"]
        assert "pickled Python objects" in reasons["pickled"]
        assert "not a FlexServ anomaly model" in reasons["foreign"]
        assert "checksum does not match" in reasons["truncated"]
        assert score(client, model="good", data=probe)["data"] == expected["data"]
        listed = {m["model"]: m for m in client.get("/v1/anomaly/models").json()["data"]}
        assert listed["foreign"]["error"] and listed["good"]["error"] is None
        fit(client, model="edited", data=train.tolist())  # a refit replaces a refused file
        assert score(client, model="edited", data=probe)["data"] == expected["data"]


UNSAFE_NAMES = ["../escape", "..", "a/b", "a\\b", ".hidden", "x" * 200, "a..b", "%2e%2e", "name with space", "", "m@x"]


@pytest.mark.slow
def test_unsafe_model_names_are_refused(serve: Serve, tmp_path: Path) -> None:
    with serve() as client:
        for name in UNSAFE_NAMES:
            response = client.post("/v1/anomaly/fit", json={"model": name, "data": [[1], [2], [3]]})
            assert error(response, 400)["param"] == "model", name
            response = client.post("/v1/anomaly/score", json={"model": name, "data": [[1]]})
            assert error(response, 400)["code"] == "invalid_model_name", name
    assert not (tmp_path.parent / "escape").exists()
    blobs = tmp_path / "state.db.blobs"
    assert not blobs.exists() or not any(blobs.iterdir())  # nothing was stored


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


@pytest.mark.slow
def test_one_api_key_s_models_do_not_exist_for_another(serve: Serve) -> None:
    train, _ = blobs(n=100, outliers=5, seed=10)
    alice, bob = {"Authorization": "Bearer key-alice"}, {"Authorization": "Bearer key-bob"}
    with serve(api_key=["key-alice", "key-bob"]) as client:
        assert (
            client.post("/v1/anomaly/fit", json={"model": "m", "data": train.tolist()}, headers=alice).status_code
            == 200
        )
        probe = {"model": "m", "data": train[:3].tolist()}
        assert client.post("/v1/anomaly/score", json=probe, headers=alice).status_code == 200
        assert error(client.post("/v1/anomaly/score", json=probe, headers=bob), 404)["code"] == "model_not_found"
        assert client.get("/v1/anomaly/models", headers=bob).json()["total"] == 0
        assert client.get("/v1/anomaly/models", headers=alice).json()["total"] == 1
        error(client.delete("/v1/anomaly/models/m", headers=bob), 404)
        # Bob's own "m" is another model; Alice's is untouched by it.
        shifted = (train * 5 + 100).tolist()
        assert client.post("/v1/anomaly/fit", json={"model": "m", "data": shifted}, headers=bob).status_code == 200
        a = client.post("/v1/anomaly/score", json=probe, headers=alice).json()["data"]
        b = client.post("/v1/anomaly/score", json=probe, headers=bob).json()["data"]
        assert [d["raw_score"] for d in a] != [d["raw_score"] for d in b]
        loaded = {m["model_id"] for m in client.get("/v1/flexserv/models/loaded", headers=alice).json()["models"]}
        assert len([name for name in loaded if name.startswith("m@key-")]) == 2


@pytest.mark.slow
def test_a_delete_that_lands_between_the_check_and_the_load_is_a_404(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A score checks that the model is stored, then loads it; a delete in between
    made the load fail, which answered 503 model_load_failed. It is a 404 now."""
    from flexserv_anomaly import routes

    checked = routes._require_stored

    async def then_deleted(service: Any, name: str, owner: str | None) -> None:
        await checked(service, name, owner)
        monkeypatch.setattr(routes, "_require_stored", checked)
        assert await service.store.delete(name, owner=owner)  # the racing delete, right after the check

    train, _ = blobs(n=60, outliers=3, seed=9)
    with serve() as client:
        fit(client, model="raced", data=train.tolist())
        monkeypatch.setattr(routes, "_require_stored", then_deleted)
        gone = error(client.post("/v1/anomaly/score", json={"model": "raced", "data": train[:2].tolist()}), 404)
        assert gone["code"] == "model_not_found"
        assert routes._require_stored is checked  # the race happened once, as staged
        fit(client, model="raced", data=train.tolist())  # nothing was left behind: the name fits and scores again
        assert len(score(client, model="raced", data=train[:2].tolist())["data"]) == 2
