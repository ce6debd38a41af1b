"""Rows as the request body itself, an NPY file (``Content-Type: application/x-npy``), with
the other fields in the ``X-FlexServ-Arguments`` header: the same answers as JSON bodies,
the same limits and checks, and hostile files refused from their header."""

from __future__ import annotations

import io
import json
from typing import Any

import httpx
import numpy as np
import pytest
from anomaly_client import Serve, error, fit, score
from synthetic import blobs

from flexserv_core import InvalidRequest, RequestContext, hookimpl

NPY = "application/x-npy"


def npy_bytes(array: np.ndarray, *, allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def post_npy(
    client: httpx.Client, path: str, rows: bytes, arguments: dict[str, Any] | str | None = None, **headers: str
) -> httpx.Response:
    sent = {"content-type": NPY, **headers}
    if arguments is not None:
        sent["x-flexserv-arguments"] = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return client.post(path, content=rows, headers=sent)


@pytest.mark.slow
def test_an_npy_body_gives_the_answers_a_json_body_gives(serve: Serve) -> None:
    train, _ = blobs(n=200, outliers=10, seed=4)
    probe = np.vstack([train[:30], [[50.0, -50.0, 50.0]]])
    with serve() as client:
        for backend in ("isolation_forest", "one_class_svm", "robust_zscore"):
            arguments = {"model": f"{backend}-body", "backend": backend, "contamination": 0.05}
            by_json = fit(client, **{**arguments, "model": f"{backend}-json"}, data=train.tolist())
            response = post_npy(client, "/v1/anomaly/fit", npy_bytes(train), arguments)
            assert response.status_code == 200, response.text
            by_body = response.json()
            assert by_body["model"] == f"{backend}-body" and by_body["samples_fitted"] == 210
            assert by_body["training_stats"] == by_json["training_stats"]
            assert by_body["model_params"] == by_json["model_params"]
            expected = score(client, model=f"{backend}-json", data=probe.tolist())
            for path in ("/v1/anomaly/score", "/v1/anomaly/detect"):
                want = (
                    expected
                    if path.endswith("score")
                    else score(client, path, model=f"{backend}-json", data=probe.tolist())
                )
                for model in (f"{backend}-json", f"{backend}-body"):
                    got = post_npy(client, path, npy_bytes(probe), {"model": model})
                    assert got.status_code == 200, got.text
                    assert got.json()["data"] == want["data"], (backend, path, model)
        # Fields other than the rows keep their defaults without the header (model "default"),
        # and a media type parameter does not matter.
        response = post_npy(client, "/v1/anomaly/fit", npy_bytes(train), None)
        assert response.status_code == 200 and response.json()["model"] == "default"
        got = post_npy(client, "/v1/anomaly/score", npy_bytes(probe), None, **{"content-type": f"{NPY}; v=1"})
        assert got.status_code == 200 and got.json()["model"] == "default"
        # Any integer or float dtype, either memory order, as in "data": {"npy": ...}.
        as_json = score(client, model="isolation_forest-json", data=probe.round().tolist())["data"]
        for variant in (probe.round().astype(np.int32), np.asfortranarray(probe.round()), probe.round().astype(">f4")):
            got = post_npy(client, "/v1/anomaly/score", npy_bytes(variant), {"model": "isolation_forest-json"})
            assert got.json()["data"] == as_json


@pytest.mark.slow
def test_npy_bodies_and_their_arguments_are_checked_as_json_bodies_are(serve: Serve) -> None:
    rows = np.ones((5, 2))
    objects = np.array([[1.0, {"a": 1}], [2.0, None]], dtype=object)
    with serve(anomaly_max_rows=100, anomaly_max_features=4, max_request_bytes=64 * 1024) as client:
        fit(client, model="m", data=[*rows.tolist(), [2.0, 3.0]])
        files: dict[str, bytes] = {
            "pickled objects": npy_bytes(objects, allow_pickle=True),
            "one dimension": npy_bytes(np.ones(5)),
            "strings": npy_bytes(np.array([["a", "b"]])),
            "no rows": npy_bytes(np.ones((0, 2))),
            "truncated": npy_bytes(rows)[:-1],
            "trailing bytes": npy_bytes(rows) + b"\0",
            "not finite": npy_bytes(np.array([[1.0, np.nan]])),
            "not an npy file": b"PK\x03\x04 a zip file",
            "a JSON body sent as NPY": json.dumps({"model": "m", "data": rows.tolist()}).encode(),
        }
        for what, data in files.items():
            for path in ("/v1/anomaly/fit", "/v1/anomaly/score", "/v1/anomaly/detect"):
                body = error(post_npy(client, path, data, {"model": "m"}), 400)
                assert body["param"] == "data", (what, path, body)
                assert "NPY body" in body["message"] or "'data[0]'" in body["message"], (what, body)
        assert "pickled" in error(post_npy(client, "/v1/anomaly/fit", files["pickled objects"], {}), 400)["message"]
        assert error(post_npy(client, "/v1/anomaly/fit", b"", {}), 400)["param"] == "data"
        # The limits: rows and features from the header, bytes from the body.
        too_many = error(post_npy(client, "/v1/anomaly/fit", npy_bytes(np.ones((101, 2))), {}), 413)
        assert too_many["code"] == "too_many_rows"
        wide = error(post_npy(client, "/v1/anomaly/score", npy_bytes(np.ones((2, 5))), {"model": "m"}), 400)
        assert wide["code"] == "too_many_features"
        big = error(post_npy(client, "/v1/anomaly/fit", npy_bytes(np.ones((100, 100))), {}), 413)
        assert "--max-request-bytes" in big["message"]
        # The arguments: JSON, an object, the route's fields with their types, never the rows.
        refusals: dict[str, tuple[Any, str]] = {
            "not JSON": ("{model: m}", "X-FlexServ-Arguments"),
            "not an object": ('["m"]', "X-FlexServ-Arguments"),
            "rows in the header": ({"model": "m", "data": [[1.0, 2.0]]}, "data"),
            "a field the route does not read": ({"model": "m", "epochs": 3}, "epochs"),
            "a wrong type": ({"model": "m", "contamination": "high"}, "contamination"),
            "out of range": ({"model": "m", "contamination": 0.9}, "contamination"),
            "a bad model name": ({"model": "../m"}, "model"),
        }
        for what, (arguments, param) in refusals.items():
            body = error(post_npy(client, "/v1/anomaly/fit", npy_bytes(rows), arguments), 400)
            assert body["param"] == param, (what, body)
        # Header bytes are Latin-1 to the server: non-ASCII text is refused, JSON escapes work.
        escaped = {"content-type": NPY, "x-flexserv-arguments": '{"model": "e", "schema": {"t\\u00e9": "numeric"}}'}
        fitted = client.post("/v1/anomaly/fit", content=npy_bytes(rows[:, :1]), headers=escaped)
        assert fitted.status_code == 200 and fitted.json()["encoder"]["features"] == ["t\u00e9"], fitted.text
        raw_utf8 = [(b"content-type", NPY.encode()), (b"x-flexserv-arguments", '{"model": "t\u00e9"}'.encode())]
        refused = error(client.post("/v1/anomaly/fit", content=npy_bytes(rows), headers=raw_utf8), 400)
        assert refused["param"] == "X-FlexServ-Arguments" and "ASCII" in refused["message"]
        twice = [(b"content-type", NPY.encode()), (b"x-flexserv-arguments", b"{}"), (b"x-flexserv-arguments", b"{}")]
        assert error(client.post("/v1/anomaly/fit", content=npy_bytes(rows), headers=twice), 400)["param"] == (
            "X-FlexServ-Arguments"
        )
        assert (
            error(post_npy(client, "/v1/anomaly/score", npy_bytes(rows), {"model": "m", "explain": 1}), 400)["param"]
            == "explain"
        )
        # After all that the model still scores, and other media types are still refused.
        assert post_npy(client, "/v1/anomaly/score", npy_bytes(rows), {"model": "m"}).json()["total_count"] == 5
        other = client.post(
            "/v1/anomaly/fit", content=npy_bytes(rows), headers={"content-type": "application/octet-stream"}
        )
        assert other.status_code == 415


class _Gatekeeper:
    """Another plugin's preprocess hook: records what it sees, refuses one model name."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []

    @hookimpl
    def flexserv_preprocess_request(self, endpoint: str, body: dict[str, Any], context: RequestContext) -> None:
        self.seen.append((endpoint, dict(body)))
        if body.get("model") == "forbidden":
            raise InvalidRequest("This deployment does not allow that model name.", param="model")


def test_other_plugins_preprocess_hooks_see_the_header_fields_of_an_npy_request(serve: Serve) -> None:
    gate = _Gatekeeper()
    train, _ = blobs(n=60, outliers=3, seed=5)
    with serve(plugins=("anomaly", gate)) as client:
        arguments = {"model": "gated", "backend": "robust_zscore", "contamination": 0.05}
        assert post_npy(client, "/v1/anomaly/fit", npy_bytes(train), arguments).status_code == 200
        refused = post_npy(client, "/v1/anomaly/score", npy_bytes(train[:5]), {"model": "forbidden"})
        body = error(refused, 400)
        assert body["param"] == "model" and "does not allow" in body["message"]
    assert gate.seen[0] == ("/v1/anomaly/fit", {**arguments, "data": []})
    assert gate.seen[1] == ("/v1/anomaly/score", {"model": "forbidden", "data": []})


def test_the_arguments_header_is_held_to_the_json_depth_limit_of_bodies(serve: Serve) -> None:
    """Nesting the interpreter cannot decode is a 400, not a 500, and the header gets the
    server's --max-json-depth (32 by default) as a JSON body does."""
    rows = npy_bytes(np.ones((5, 2)))

    def nested(depth: int) -> str:  # an object with `parameters` nested to `depth` levels in all
        return '{"model": "m", "parameters": {"p": ' + "[" * (depth - 2) + "]" * (depth - 2) + "}}"

    with serve() as client:
        for path in ("/v1/anomaly/fit", "/v1/anomaly/score", "/v1/anomaly/detect"):
            for arguments in ("[" * 1000 + "]" * 1000, nested(1000), nested(40), nested(33)):
                body = error(post_npy(client, path, rows, arguments), 400)
                assert body["code"] == "json_too_deep" and body["param"] == "X-FlexServ-Arguments", (path, body)
                assert "X-FlexServ-Arguments header" in body["message"] and "--max-json-depth" in body["message"]
            # one level less passes the depth check (and is refused for the parameter itself)
            assert error(post_npy(client, path, rows, nested(32)), 400)["code"] != "json_too_deep"
            # the JSON body's answer, for comparison
            too_deep = '{"data": [[1.0, 2.0]], ' + nested(33)[1:]
            as_body = client.post(path, content=too_deep, headers={"content-type": "application/json"})
            assert error(as_body, 400)["code"] == "json_too_deep"
        empty = error(post_npy(client, "/v1/anomaly/fit", rows, ""), 400)
        assert empty["code"] == "invalid_json" and empty["param"] == "X-FlexServ-Arguments"
