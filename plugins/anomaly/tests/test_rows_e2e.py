"""What rows a model takes: object rows only for a model with named features, numbers
only (never booleans), and refusals that say what is expected."""

from __future__ import annotations

from typing import Any

import pytest
from anomaly_client import Serve, error, fit, score
from flexserv_anomaly.inputs import parse
from flexserv_anomaly.settings import AnomalySettings

from flexserv_core import InvalidRequest

ROWS = [[20.1, 0.5], [20.3, 0.4], [19.9, 0.6], [20.0, 0.5], [20.2, 0.45], [35.0, 3.0]]


def test_a_model_fitted_on_unnamed_columns_refuses_object_rows(serve: Serve) -> None:
    with serve() as client:
        fit(client, model="m", data=ROWS)
        for path in ("/v1/anomaly/score", "/v1/anomaly/detect"):
            for row in ({"zzz": 40, "yyy": 4}, {"yyy": 4, "zzz": 40}):
                refused = error(client.post(path, json={"model": "m", "data": [row]}), 400)
                assert refused["code"] == "invalid_data" and refused["param"] == "data", refused
                assert "'data[0]'" in refused["message"] and "unnamed columns" in refused["message"]
        # a schema cannot name them either, and says why
        body = {"model": "m", "data": ROWS, "schema": {"a": "numeric", "b": "numeric"}}
        schema = error(client.post("/v1/anomaly/score", json=body), 400)
        assert schema["param"] == "schema" and "has no named features" in schema["message"], schema
        assert "None" not in schema["message"] and "unnamed columns" in schema["message"]
        # a model with named features still takes objects in any key order
        fit(client, model="named", data=[{"a": a, "b": b} for a, b in ROWS])
        orders = [[{"a": 40, "b": 4}], [{"b": 4, "a": 40}]]
        assert len({score(client, model="named", data=rows)["data"][0]["raw_score"] for rows in orders}) == 1
        other = error(
            client.post("/v1/anomaly/score", json={**body, "model": "named", "schema": {"b": "numeric"}}), 400
        )
        assert other["param"] == "schema" and "['a', 'b']" in other["message"], other
        # so does a stream: one created with list points refuses object points
        stream = {"model": "s", "backend": "robust_zscore", "min_samples": 10, "window_size": 50}
        assert client.post("/v1/anomaly/stream", json={**stream, "data": ROWS * 2}).status_code == 200
        refused = error(client.post("/v1/anomaly/stream", json={"model": "s", "data": {"zzz": 40, "yyy": 4}}), 400)
        assert "unnamed columns" in refused["message"] and refused["param"] == "data"


def test_booleans_are_not_numbers(serve: Serve) -> None:
    with serve() as client:
        cases: dict[str, tuple[list[Any], str]] = {
            "in a list row": ([[True, False], [1, 2]], "'data[0][0]'"),
            "in a later row": ([[1, 2], [3, 4], [5, True]], "'data[2][1]'"),
            "one feature": ([1.0, True, 2.0], "'data[1]'"),
            "the first of one feature": ([False, 1.0, 2.0], "'data[0]'"),
            "in an object": ([{"a": 1, "b": 2}, {"a": 3, "b": False}], "'data[1].b'"),
        }
        for what, (data, where) in cases.items():
            refused = error(client.post("/v1/anomaly/fit", json={"model": "b", "data": data}), 400)
            assert refused["param"] == "data" and where in refused["message"], (what, refused)
            assert "boolean" in refused["message"], (what, refused)
        fit(client, model="m", data=ROWS)
        refused = error(client.post("/v1/anomaly/score", json={"model": "m", "data": [[20.0, 0.5], [True, 1]]}), 400)
        assert "'data[1][0]' is true (a boolean), not a number" in refused["message"], refused
        # 0 and 1 as numbers are still numbers
        assert score(client, model="m", data=[[0, 1], [1.0, 0.0]])["total_count"] == 2


def test_refusals_say_what_is_expected(serve: Serve) -> None:
    with serve() as client:
        refused = error(client.post("/v1/anomaly/stream", json={"model": "s", "data": [None, 1.0]}), 400)
        assert "-1" not in refused["message"] and "'data[0]' is null" in refused["message"], refused
        assert "lists of numbers" in refused["message"]
        for data, expected in (
            ([[1.0, 2.0], None], "'data[1]' is null; rows are lists of 2 numbers"),
            ([[1.0, 2.0], [1.0]], "'data[1]' has 1 values; rows are lists of 2 numbers"),
            ([[1.0, 2.0], [1.0, "x"]], "'data[1][1]' is a text, not a number"),
            ([1.0, [2.0]], "'data[1]' is a list, not a number like 'data[0]'"),
        ):
            refused = error(client.post("/v1/anomaly/fit", json={"model": "e", "data": data}), 400)
            assert expected in refused["message"], refused


@pytest.mark.parametrize(
    ("data", "unnamed", "expected"),
    [
        ([{"b": 1, "a": 2}], True, "unnamed columns"),
        ([[True, 0]], False, "'data[0][0]' is true (a boolean)"),
        ([[0.0, 1.0], [1.0, False]], False, "'data[1][1]' is false (a boolean)"),
        ([None], False, "'data[0]' is null;"),
        (["a", 1], False, "'data[1]' is not a text"),
    ],
)
def test_parse_refuses(data: list[Any], unnamed: bool, expected: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(data, AnomalySettings(), unnamed=unnamed)
    assert expected in caught.value.message and caught.value.param == "data"


def test_parse_takes_objects_when_their_names_are_known() -> None:
    rows = parse([{"b": 1, "a": 2}], AnomalySettings(), features=["a", "b"])
    assert rows.matrix is not None and rows.matrix.tolist() == [[2.0, 1.0]]
    assert parse([{"b": 1, "a": 2}], AnomalySettings()).features == ["b", "a"]  # at fit: the first row's keys
