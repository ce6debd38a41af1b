"""The persistence format without a server: round trip per detector and every refusal."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from flexserv_anomaly import codec, fitted
from flexserv_anomaly.detectors import DETECTORS, check_params
from flexserv_anomaly.store import BadName, check_name, parse_registry_name, registry_name
from synthetic import blobs

CORE = ["isolation_forest", "local_outlier_factor", "one_class_svm", "robust_zscore"]
LIMIT = 1 << 26


def _model(backend: str = "isolation_forest", features: list[str] | None = None) -> fitted.FittedModel:
    x, _ = blobs(n=120, outliers=6, seed=11)
    spec = fitted.FitSpec(
        backend=backend, params=check_params(DETECTORS[backend], {}), contamination=0.05, features=features
    )
    return fitted.fit(spec, x)


@pytest.mark.parametrize("backend", CORE)
def test_a_decoded_model_scores_exactly_as_the_fitted_one(backend: str) -> None:
    model = _model(backend)
    header, blob = codec.encode(model, "m")
    again = codec.decode(json.loads(json.dumps(header)), blob, max_bytes=LIMIT)
    probe, _ = blobs(n=30, outliers=5, seed=12)
    assert np.array_equal(again.raw_scores(probe), model.raw_scores(probe))
    assert again.stats == model.stats


def test_the_checksum_is_sha256_of_the_canonical_header_a_nul_and_the_archive() -> None:
    """The documented checksum, computed here from its definition: models stored by any
    earlier version must keep verifying."""
    import hashlib

    header, blob = codec.encode(_model(), "m")
    body = {k: v for k, v in header.items() if k != "checksum"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    assert header["checksum"] == "sha256:" + hashlib.sha256(canonical + b"\0" + blob).hexdigest()


def test_the_stored_archive_is_what_np_savez_writes() -> None:
    model = _model()
    _, blob = codec.encode(model, "m")
    expected = io.BytesIO()
    np.savez(expected, **{k: getattr(model, k) for k in ("center", "scale", "train", "fingerprint")})
    ours, theirs = zipfile.ZipFile(io.BytesIO(blob)), zipfile.ZipFile(expected)
    assert [i.filename for i in ours.infolist()] == [i.filename for i in theirs.infolist()]
    for info in theirs.infolist():
        assert ours.read(info.filename) == theirs.read(info.filename)  # the same NPY files, byte for byte
        assert ours.getinfo(info.filename).compress_type == zipfile.ZIP_STORED


def _refused(header: dict, blob: bytes, why: str) -> None:
    with pytest.raises(codec.CorruptModel, match=why):
        codec.decode(header, blob, max_bytes=LIMIT)


def test_edits_and_foreign_content_are_refused() -> None:
    header, blob = codec.encode(_model(), "m")
    _refused({**header, "contamination": 0.2}, blob, "checksum")
    _refused(header, blob[:-1] + bytes([blob[-1] ^ 1]), "checksum")
    _refused({**header, "format_version": 2}, blob, "format version")
    _refused({**header, "format": "joblib"}, blob, "not a FlexServ")
    # Consistent checksums over hostile content: the checks behind the checksum still hold.
    for change, why in [
        ({"backend": "os.system"}, "Unknown anomaly backend"),
        ({"params": {"n_estimators": 100, "__reduce__": 1}}, "not a parameter"),
        ({"contamination": 0.9}, "contamination"),
    ]:
        edited = {**header, **change}
        edited["checksum"] = codec.checksum(edited, blob)
        _refused(edited, blob, why)
    buffer = io.BytesIO()
    np.savez(
        buffer, center=np.zeros(3), scale=np.ones(3), train=np.array([{"x": 1}], dtype=object), fingerprint=np.zeros(1)
    )
    evil = {**header, "checksum": codec.checksum(header, buffer.getvalue())}
    _refused(evil, buffer.getvalue(), "pickled Python objects")
    extra = io.BytesIO()
    np.savez(
        extra, center=np.zeros(3), scale=np.ones(3), train=np.zeros((4, 3)), fingerprint=np.zeros(1), more=np.zeros(1)
    )
    _refused({**header, "checksum": codec.checksum(header, extra.getvalue())}, extra.getvalue(), "archive holds")


def test_a_model_whose_refit_differs_is_refused() -> None:
    header, blob = codec.encode(_model(), "m")
    edited = {**header, "params": {**header["params"], "random_state": 7}}  # another forest from the same rows
    edited["checksum"] = codec.checksum(edited, blob)
    _refused(edited, blob, "does not reproduce")


@pytest.mark.parametrize("name", ["../x", "..", "a/b", ".x", "", "a..b", "x" * 129, "é", "a@b"])
def test_unsafe_names_are_refused(name: str) -> None:
    with pytest.raises(BadName):
        check_name(name)


def test_registry_names_keep_owners_apart() -> None:
    owner = "key-" + "0" * 32
    assert registry_name("m", None) == "m" and parse_registry_name("m") == ("m", None)
    assert parse_registry_name(registry_name("m", owner)) == ("m", owner)
    assert parse_registry_name("m@someone") is None and parse_registry_name("../m") is None
