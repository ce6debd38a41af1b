"""Rows as a base64 NPY file (``"data": {"npy": ...}``): the same answers as JSON rows,
and hostile files refused from their header, before anything is allocated or unpickled."""

from __future__ import annotations

import base64
import io
import pickle
from typing import Any

import numpy as np
import pytest
from anomaly_client import Serve, error, fit, score
from synthetic import blobs


def npy(array: np.ndarray, *, allow_pickle: bool = False) -> dict[str, str]:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return {"npy": base64.b64encode(buffer.getvalue()).decode()}


def forged(header: dict[str, Any], payload: bytes = b"") -> dict[str, str]:
    """An NPY file whose header says what we like, followed by ``payload``."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return {"npy": base64.b64encode(buffer.getvalue() + payload).decode()}


@pytest.mark.slow
def test_npy_rows_give_the_answers_json_rows_give(serve: Serve) -> None:
    train, _ = blobs(n=200, outliers=10, seed=4)
    probe = np.vstack([train[:30], [[50.0, -50.0, 50.0]]])
    with serve() as client:
        for backend in ("isolation_forest", "local_outlier_factor"):
            by_json = fit(client, model=f"{backend}-json", backend=backend, data=train.tolist())
            by_npy = fit(client, model=f"{backend}-npy", backend=backend, data=npy(train))
            assert by_npy["samples_fitted"] == 210 and by_npy["model_params"]["input_dim"] == 3
            assert by_npy["model_params"]["threshold"] == by_json["model_params"]["threshold"]
            expected = score(client, model=f"{backend}-json", data=probe.tolist())
            for name in (f"{backend}-json", f"{backend}-npy"):
                got = score(client, model=name, data=npy(probe))
                assert got["data"] == expected["data"] and got["summary"] == expected["summary"]
            detected = score(client, "/v1/anomaly/detect", model=f"{backend}-npy", data=npy(probe))
            assert 30 in [d["index"] for d in detected["data"]]
            assert set(detected["data"][0]) == {"index", "score", "raw_score"}
        # Any integer or float dtype, either memory order: converted to float64.
        as_json = score(client, model="isolation_forest-json", data=probe.round().tolist())["data"]
        for variant in (probe.round().astype(np.int32), np.asfortranarray(probe.round()), probe.round().astype(">f4")):
            assert score(client, model="isolation_forest-json", data=npy(variant))["data"] == as_json
        # A model fitted on named features takes NPY columns in the fitted order.
        named = [{"a": r[0], "b": r[1], "c": r[2]} for r in train.tolist()]
        fit(client, model="named", data=named)
        assert (
            score(client, model="named", data=npy(probe))["data"]
            == score(client, model="named", data=[{"c": r[2], "a": r[0], "b": r[1]} for r in probe.tolist()])["data"]
        )
        narrow = error(client.post("/v1/anomaly/score", json={"model": "named", "data": npy(probe[:, :2])}), 400)
        assert narrow["param"] == "data" and "features" in narrow["message"]


@pytest.mark.slow
def test_hostile_npy_payloads_are_refused_with_400s_naming_data(serve: Serve) -> None:
    rows = np.ones((5, 2))
    objects = np.array([[1.0, {"a": 1}], [2.0, None]], dtype=object)
    with serve(anomaly_max_rows=100, anomaly_max_features=4, max_request_bytes=64 * 1024) as client:
        fit(client, model="m", data=[*rows.tolist(), [2.0, 3.0]])
        cases: dict[str, Any] = {
            "pickled objects": npy(objects, allow_pickle=True),
            "object dtype header, pickle after": forged(
                {"descr": "|O", "fortran_order": False, "shape": (1, 1)}, pickle.dumps([1.0])
            ),
            "one dimension": npy(np.ones(5)),
            "three dimensions": npy(np.ones((2, 2, 2))),
            "strings": npy(np.array([["a", "b"]])),
            "booleans": npy(np.ones((2, 2), dtype=bool)),
            "complex": npy(np.ones((2, 2), dtype=complex)),
            "structured": npy(np.zeros((2, 2), dtype=[("x", "<f8")])),
            "no rows": npy(np.ones((0, 2))),
            "truncated": forged({"descr": "<f8", "fortran_order": False, "shape": (5, 2)}, b"\0" * 79),
            "trailing bytes": forged({"descr": "<f8", "fortran_order": False, "shape": (1, 2)}, b"\0" * 24),
            "not finite": npy(np.array([[1.0, np.nan]])),
            "bad base64": {"npy": "not base64!"},
            "not an npy file": {"npy": base64.b64encode(b"PK\x03\x04 a zip file").decode()},
            "not a header": {"npy": base64.b64encode(b"\x93NUMPY\x01\x00\x04\x00abc\n").decode()},
        }
        for what, data in cases.items():
            for path in ("/v1/anomaly/fit", "/v1/anomaly/score", "/v1/anomaly/detect"):
                body = error(client.post(path, json={"model": "m", "data": data}), 400)
                assert body["param"] == "data", (what, path, body)
                assert "'data.npy'" in body["message"] or "'data[0]'" in body["message"], (what, body)
        wide = error(client.post("/v1/anomaly/score", json={"model": "m", "data": npy(np.ones((2, 5)))}), 400)
        assert wide["param"] == "data" and wide["code"] == "too_many_features"
        assert (
            "pickled"
            in error(client.post("/v1/anomaly/score", json={"model": "m", "data": cases["pickled objects"]}), 400)[
                "message"
            ]
        )
        # Too many rows is a 413 from the header alone: the 10^12 rows it claims are never allocated.
        huge = forged({"descr": "<f8", "fortran_order": False, "shape": (10**12, 2)}, b"\0" * 16)
        too_many = error(client.post("/v1/anomaly/score", json={"model": "m", "data": huge}), 413)
        assert too_many["code"] == "too_many_rows" and too_many["param"] == "data"
        assert (
            error(client.post("/v1/anomaly/fit", json={"data": npy(np.ones((101, 2)))}), 413)["code"] == "too_many_rows"
        )
        # The body limit bounds the file: 64 KiB of base64 is refused before it is decoded.
        big = error(client.post("/v1/anomaly/score", json={"model": "m", "data": npy(np.ones((100, 100)))}), 413)
        assert "--max-request-bytes" in big["message"]
        unknown = error(
            client.post("/v1/anomaly/score", json={"model": "m", "data": {**npy(rows), "dtype": "f8"}}), 400
        )
        assert unknown["param"].startswith("data")
        wrong_type = error(client.post("/v1/anomaly/score", json={"model": "m", "data": {"npy": 5}}), 400)
        assert wrong_type["param"].startswith("data")
        # After all that the model still scores.
        assert score(client, model="m", data=npy(rows))["total_count"] == 5


@pytest.mark.slow
def test_a_schema_names_the_columns_of_npy_and_list_rows(serve: Serve) -> None:
    """Rows without names fitted with a ``schema``: the schema's order is the model's
    features, so objects in any key order, and the same schema, score as those rows."""
    train, _ = blobs(n=200, outliers=10, seed=5)
    probe = train[:20]
    schema = {"a": "numeric", "b": "numeric", "c": "numeric"}
    shuffled = [{"c": r[2], "a": r[0], "b": r[1]} for r in probe.tolist()]
    with serve() as client:
        for name, data in (("as-npy", npy(train)), ("as-lists", train.tolist())):
            result = fit(client, model=name, data=data, schema=schema)
            assert result["encoder"] == {"schema": schema, "features": ["a", "b", "c"]}
            expected = score(client, model=name, data=npy(probe))["data"]
            assert score(client, model=name, data=shuffled)["data"] == expected
            assert score(client, model=name, data=probe.tolist(), schema=schema)["data"] == expected


def test_base64_is_checked_as_strictly_as_b64decode_validate() -> None:
    from flexserv_anomaly.inputs import parse_npy
    from flexserv_anomaly.settings import AnomalySettings

    from flexserv_core import InvalidRequest

    good = npy(np.arange(6, dtype=np.float64).reshape(3, 2))["npy"]
    assert np.array_equal(parse_npy(good, AnomalySettings()).matrix, np.arange(6.0).reshape(3, 2))
    cut = good.rstrip("=")
    for text in [good[:4] + "\n" + good[4:], " " + good, good + "=", cut + "=" * 3, good[:-1] + "*", "é" + good]:
        if text.endswith("=" * 3) and len(cut) % 4 == 0:
            continue  # no padding to spoil
        with pytest.raises(InvalidRequest, match="not valid base64"):
            parse_npy(text, AnomalySettings())
        with pytest.raises(ValueError):
            base64.b64decode(text, validate=True)


@pytest.mark.parametrize("dtype", ["<f8", ">f8", "<f4", ">i4", "<u2", "|u1", "<i8"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_npy_rows_are_the_values_numpy_reads_bit_for_bit(dtype: str, order: str) -> None:
    """The rows are read from the decoded bytes in place (``np.frombuffer``): the same float64
    matrix, value for value and bit for bit, as ``np.load`` of the file converted to float64,
    whatever the file's dtype, byte order and memory order."""
    from flexserv_anomaly.inputs import parse_npy
    from flexserv_anomaly.settings import AnomalySettings

    rng = np.random.default_rng(7)
    values = rng.normal(scale=1000.0, size=(37, 5))
    if np.dtype(dtype).kind in "iu":
        values = np.abs(values) % np.iinfo(np.dtype(dtype)).max
    array = np.asarray(values, dtype=np.dtype(dtype), order=order)
    encoded = npy(array)["npy"]
    expected = np.load(io.BytesIO(base64.b64decode(encoded)), allow_pickle=False).astype(np.float64)
    got = parse_npy(encoded, AnomalySettings()).matrix
    assert got is not None
    assert got.dtype == np.float64 and got.flags.c_contiguous and got.shape == (37, 5)
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()
