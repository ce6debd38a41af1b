"""The persistence format: a JSON header and an NPZ of plain float64 arrays.

Why not pickle, joblib or skops: loading any of them builds Python objects that
the file describes, so the file decides what code runs (pickle, joblib), or the
safety rests on a list of trusted types kept in step with scikit-learn's
internals (skops). Here nothing in a file chooses a class: the header names one
of the detectors of :data:`flexserv_anomaly.detectors.DETECTORS` and gives
numbers; the NPZ holds four numeric arrays, read with ``allow_pickle=False``
after checking the archive's members and sizes. The detector is then *refitted*
on the stored (scaled) training rows, which every detector here does
deterministically, and its scores of the first rows are compared with the
scores recorded at fit time: a model that would not reproduce is refused.

A SHA-256 over the header (without the checksum) and the NPZ detects a corrupt
or edited file; it is not a signature (whoever can write the store can
recompute it), and safety does not rest on it: a file that passes it still
cannot run code.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from typing import Any

import numpy as np

from flexserv_anomaly import detectors
from flexserv_anomaly.fitted import NORMALIZATIONS, FitSpec, FittedModel, ScoreStats, assemble, fit_detector

FORMAT = "flexserv-anomaly"
FORMAT_VERSION = 1
_ARRAYS = ("center", "scale", "train", "fingerprint")


class CorruptModel(Exception):
    """A stored model that must not be used; the message says why."""


def _canonical(header: dict[str, Any]) -> bytes:
    return json.dumps(header, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def checksum(header: dict[str, Any], blob: bytes) -> str:
    body = {k: v for k, v in header.items() if k != "checksum"}
    # The digest of header, NUL, blob, fed in parts: concatenating them first copied the blob
    # (1.3 MB for 10,000 x 16 rows) on the path of every fit's answer and every load.
    digest = hashlib.sha256(_canonical(body))
    digest.update(b"\0")
    digest.update(blob)
    return "sha256:" + digest.hexdigest()


def _versions() -> dict[str, str]:
    import sklearn

    return {"scikit-learn": sklearn.__version__, "numpy": np.__version__}


class Archive:
    """The NPZ of a model, begun with the rows before the fit and finished with the
    fingerprint after it: the fit's server process writes the training rows (scaled as
    the worker scaled them) while the worker fits, instead of the worker writing them
    after the fit and sending them over the pipe."""

    def __init__(self, center: np.ndarray, scale: np.ndarray, train: np.ndarray) -> None:
        self._buffer = io.BytesIO()
        self._zip = zipfile.ZipFile(self._buffer, "w", compression=zipfile.ZIP_STORED, allowZip64=True)
        self.shapes: dict[str, list[int]] = {}
        for key, value in (("center", center), ("scale", scale), ("train", train)):
            self._add(key, value)

    def _add(self, key: str, value: np.ndarray) -> None:
        # What np.savez writes (stored members, zip64, NPY format 1.0 headers), each array
        # written straight from its memory where np.savez copies it into bytes first.
        value = np.ascontiguousarray(value, dtype=np.float64)
        self.shapes[key] = list(value.shape)
        with self._zip.open(f"{key}.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(member, np.lib.format.header_data_from_array_1_0(value))
            member.write(value.data.cast("B"))

    def finish(self, fingerprint: np.ndarray) -> bytes:
        self._add("fingerprint", fingerprint)
        self._zip.close()
        return self._buffer.getvalue()


def encode(model: FittedModel, name: str, archive: Archive | None = None) -> tuple[dict[str, Any], bytes]:
    """``(header, blob)``: the record payload and the NPZ bytes of ``model``."""
    return encode_fit(
        name,
        model.spec,
        model.stats,
        archive or Archive(model.center, model.scale, model.train),
        model.fingerprint,
        training_time_ms=model.training_time_ms,
        fitted_at=model.fitted_at,
    )


def encode_fit(
    name: str,
    spec: FitSpec,
    stats: ScoreStats,
    archive: Archive,
    fingerprint: np.ndarray,
    *,
    training_time_ms: float,
    fitted_at: float,
) -> tuple[dict[str, Any], bytes]:
    """:func:`encode` from a fit's parts: its rows already in ``archive``."""
    blob = archive.finish(fingerprint)
    samples, n_features = archive.shapes["train"]
    header: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": name,
        "backend": spec.backend,
        "params": spec.params,
        "contamination": spec.contamination,
        "scaler": spec.scaler,
        "features": spec.features,
        "schema": spec.schema,
        "input_type": spec.input_type,
        "embedding_model": spec.embedding_model,
        "stats": {
            "median": stats.median,
            "iqr": stats.iqr,
            "mean": stats.mean,
            "std": stats.std,
            "quantile": stats.quantile,
        },
        "thresholds": {how: stats.threshold(how) for how in NORMALIZATIONS},
        "samples": samples,
        "n_features": n_features,
        "training_time_ms": training_time_ms,
        "fitted_at": fitted_at,
        "library": _versions(),
        "arrays": archive.shapes,
    }
    header["checksum"] = checksum(header, blob)
    return header, blob


def _need(condition: bool, why: str) -> None:
    if not condition:
        raise CorruptModel(why)


def _read_arrays(blob: bytes, header: dict[str, Any], max_bytes: int) -> dict[str, np.ndarray]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(blob))
    except zipfile.BadZipFile:
        raise CorruptModel("its array archive is not an NPZ file") from None
    with archive:
        members = {info.filename: info for info in archive.infolist()}
        _need(set(members) == {f"{k}.npy" for k in _ARRAYS}, f"its archive holds {sorted(members)}, not {_ARRAYS}")
        _need(sum(i.file_size for i in members.values()) <= max_bytes, "its arrays are larger than the limit")
        try:
            loaded = np.load(io.BytesIO(blob), allow_pickle=False)
            arrays = {k: loaded[k] for k in _ARRAYS}
        except ValueError as exc:
            if "allow_pickle" in str(exc) or "Object arrays" in str(exc):
                raise CorruptModel("it contains pickled Python objects, which are never loaded") from None
            raise CorruptModel(f"its arrays are unreadable ({exc})") from None
    for key, value in arrays.items():
        _need(value.dtype == np.float64, f"array '{key}' is {value.dtype}, not float64")
        _need(list(value.shape) == header["arrays"][key], f"array '{key}' does not have the shape the header says")
        _need(bool(np.isfinite(value).all()), f"array '{key}' holds NaN or infinite values")
    return arrays


def decode(header: dict[str, Any], blob: bytes, *, max_bytes: int) -> FittedModel:
    """Check everything, refit from the stored rows and compare with the recorded scores.

    Raises :class:`CorruptModel` (never anything that ran code from the file)."""
    _need(isinstance(header, dict) and header.get("format") == FORMAT, "it is not a FlexServ anomaly model")
    version = header.get("format_version")
    _need(version == FORMAT_VERSION, f"its format version {version!r} is not {FORMAT_VERSION} (this server's)")
    _need(header.get("checksum") == checksum(header, blob), "its checksum does not match: it was modified or corrupted")
    try:
        info = detectors.lookup(str(header["backend"]))
        params = detectors.check_params(info, header["params"])
        contamination = float(header["contamination"])
        _need(0 < contamination <= 0.5, "its contamination is out of range")
        spec = FitSpec(
            backend=info.name,
            params=params,
            contamination=contamination,
            scaler=header["scaler"],
            features=header["features"],
            input_type=header["input_type"],
            embedding_model=header["embedding_model"],
            schema=header["schema"],
        )
        _need(spec.scaler in ("robust", "standard", "none"), "its scaler is unknown")
        _need(spec.input_type in ("numeric", "text"), "its input type is unknown")
        timing, fitted_at = float(header["training_time_ms"]), float(header["fitted_at"])
        shapes = header["arrays"]
        _need(
            isinstance(shapes, dict) and all(isinstance(shapes.get(k), list) for k in _ARRAYS),
            "its array shapes are missing",
        )
    except detectors.DetectorError as exc:
        raise CorruptModel(f"its detector settings are invalid ({exc})") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptModel(f"its header is incomplete or malformed ({type(exc).__name__}: {exc})") from None
    arrays = _read_arrays(blob, header, max_bytes)
    train = arrays["train"]
    _need(train.ndim == 2 and train.shape[0] >= 2, "its training rows are missing")
    n = train.shape[1]
    _need(arrays["center"].shape == (n,) and arrays["scale"].shape == (n,), "its scaler does not match its rows")
    _need(bool((arrays["scale"] > 0).all()), "its scaler has a zero scale")
    _need(spec.features is None or len(spec.features) == n, "its feature names do not match its rows")
    detector, fingerprint, raw = fit_detector(spec, train)
    recorded = arrays["fingerprint"]
    _need(
        recorded.shape == fingerprint[: len(recorded)].shape
        and np.allclose(fingerprint[: len(recorded)], recorded, rtol=1e-7, atol=1e-9),
        "refitting it does not reproduce the scores recorded at fit time "
        f"(fitted with {header.get('library')}, this server has {_versions()}): fit it again",
    )
    # The score statistics come from the refit, not from the header.
    model = assemble(spec, arrays["center"], arrays["scale"], train, detector, fingerprint, raw, timing)
    model.fitted_at = fitted_at
    return model
