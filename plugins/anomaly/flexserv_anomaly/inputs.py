"""Request data to float matrices: numeric rows, rows of named features, texts, or an NPY file."""

from __future__ import annotations

import binascii
import io
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from flexserv_anomaly.settings import AnomalySettings
from flexserv_core import InvalidRequest, PayloadTooLarge

#: Encoder types of the source runtime's ``schema``; only ``numeric`` is implemented.
SCHEMA_TYPES = ("numeric",)


#: Largest NPY header read (numpy's own default bound): the header is parsed before any array is made.
NPY_MAX_HEADER = 10_000


class NpyData(msgspec.Struct, forbid_unknown_fields=True):
    """``"data": {"npy": "<base64>"}``: the rows as one NumPy ``.npy`` file, a 2-D numeric
    array. Decoding it costs a copy, where JSON rows cost a Python object per value."""

    npy: str


@dataclass
class Rows:
    """``matrix`` for numeric data; ``texts`` (matrix ``None``) for text data."""

    matrix: np.ndarray | None
    texts: list[str] | None
    features: list[str] | None

    def __len__(self) -> int:
        return len(self.texts) if self.texts is not None else len(self.matrix)  # type: ignore[arg-type]


def _bad(message: str, param: str = "data", code: str = "invalid_data") -> InvalidRequest:
    return InvalidRequest(message, param=param, code=code)


def check_schema(schema: dict[str, str] | None) -> list[str] | None:
    if schema is None:
        return None
    if not schema:
        raise _bad("'schema' must name at least one feature.", "schema")
    for name, kind in schema.items():
        if kind not in SCHEMA_TYPES:
            raise InvalidRequest(
                f"Feature encoding {kind!r} of 'schema.{name}' is not implemented here; "
                f"supported: {', '.join(SCHEMA_TYPES)}.",
                param=f"schema.{name}",
                code="unsupported_parameter",
            )
    return list(schema)


def parse(data: Any, limits: AnomalySettings, *, features: list[str] | None = None, unnamed: bool = False) -> Rows:
    """Check and convert ``data``. ``features`` fixes the column order of rows given as
    objects (from the schema or the fitted model); without it the first row's keys do,
    unless ``unnamed``: the rows are for a model fitted on columns without names, which
    refuses object rows (their keys name nothing it knows, and their order is no order)."""
    if not isinstance(data, list) or not data:
        raise _bad("'data' must be a non-empty list of rows (lists of numbers or objects) or of texts.")
    if len(data) > limits.anomaly_max_rows:
        raise _too_many_rows(len(data), limits)
    first = data[0]
    if isinstance(first, str):
        return Rows(None, _texts(data, limits), None)
    if isinstance(first, dict):
        if unnamed:
            raise _bad(
                "'data[0]' is an object of named features, but the model was fitted on unnamed columns "
                "(rows as lists of numbers): send each row as a list of its values, in the order of the fit."
            )
        names = features or [str(k) for k in first]
        _check_width(len(names), limits)
        matrix = _named(data, names)
        return Rows(_finite(matrix), None, names)
    if _is_number(first):
        if features is not None and len(features) != 1:
            raise _bad(f"'data' is a list of numbers (one feature); the model's features are {features}.")
        for i, value in enumerate(data):
            if not _is_number(value):
                raise _bad(f"'data[{i}]' is {_describe(value)}, not a number like 'data[0]' (one feature's values).")
        return Rows(_finite(_numeric([[v] for v in data], limits)), None, None)
    if not isinstance(first, list):
        raise _bad(
            f"'data[0]' is {_describe(first)}; send rows (lists of numbers, or objects of named features), "
            "numbers (the values of one feature) or texts."
        )
    if features is not None and len(first) != len(features):
        raise _bad(f"'data[0]' has {len(first)} values; the model's features are {features}.")
    return Rows(_finite(_numeric(data, limits)), None, None)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _describe(value: Any) -> str:
    """``value``'s JSON type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a text"
    return "an object" if isinstance(value, dict) else "a list" if isinstance(value, list) else type(value).__name__


def _texts(data: list[Any], limits: AnomalySettings) -> list[str]:
    for i, text in enumerate(data):
        if not isinstance(text, str):
            raise _bad(f"'data[{i}]' is not a text; a request holds only texts or only rows.")
        if not text.strip():
            raise _bad(f"'data[{i}]' is an empty text.")
        if len(text) > limits.anomaly_max_text_chars:
            raise _bad(
                f"'data[{i}]' is {len(text)} characters long; this server accepts at most "
                f"{limits.anomaly_max_text_chars} (--anomaly-max-text-chars).",
                code="input_too_long",
            )
    return list(data)


def _check_width(width: int, limits: AnomalySettings) -> None:
    if width > limits.anomaly_max_features:
        raise _bad(
            f"Rows have {width} features; this server accepts at most {limits.anomaly_max_features} "
            "(--anomaly-max-features).",
            code="too_many_features",
        )
    if width == 0:
        raise _bad("Rows must have at least one feature.")


def _numeric(data: list[Any], limits: AnomalySettings) -> np.ndarray:
    """List rows (``data[0]`` is a list) as a matrix: rows as long as the first, numbers only."""
    width = len(data[0])
    _check_width(width, limits)
    for i, row in enumerate(data):
        if not isinstance(row, list):
            raise _bad(f"'data[{i}]' is {_describe(row)}; rows are lists of {width} numbers like 'data[0]'.")
        if len(row) != width:
            raise _bad(f"'data[{i}]' has {len(row)} values; rows are lists of {width} numbers like 'data[0]'.")
    try:
        matrix = np.asarray(data, dtype=np.float64)
    except (TypeError, ValueError):
        _refuse_non_numbers(data, range(len(data)))
        raise _bad("'data' is not a matrix of numbers.") from None
    # numpy reads true and false as 1.0 and 0.0: only rows holding such values can hide a
    # boolean, so only they are looked at (all rows, in C, cost as much as the conversion)
    if matrix.ndim == 2:
        suspects = np.flatnonzero(((matrix == 0) | (matrix == 1)).any(axis=1))
        _refuse_non_numbers(data, (i for i in suspects.tolist() if bool in map(type, data[i])))
    return matrix


def _refuse_non_numbers(data: list[Any], rows: Iterable[int]) -> None:
    """Refuse the first value of ``rows`` of ``data`` that is not a number, naming it."""
    for i in rows:
        for j, value in enumerate(data[i]):
            if not _is_number(value):
                raise _bad(f"'data[{i}][{j}]' is {_describe(value)}, not a number.") from None


def _named(data: list[Any], names: list[str]) -> np.ndarray:
    wanted = set(names)
    out = np.empty((len(data), len(names)), dtype=np.float64)
    for i, row in enumerate(data):
        if not isinstance(row, dict):
            raise _bad(f"'data[{i}]' is not an object like 'data[0]'.")
        if len(row) != len(names) or row.keys() != wanted:
            missing = [n for n in names if n not in row]
            extra = [k for k in row if k not in wanted]
            raise _bad(f"'data[{i}]' must have exactly the features {names}; missing {missing}, unexpected {extra}.")
        for j, name in enumerate(names):
            value = row[name]
            if not _is_number(value):
                raise _bad(f"'data[{i}].{name}' is {_describe(value)}, not a number.")
            out[i, j] = value
    return out


def _finite(matrix: np.ndarray) -> np.ndarray:
    if matrix.ndim != 2:
        raise _bad("'data' must be a list of rows.")
    if not np.isfinite(matrix).all():
        i = int(np.argwhere(~np.isfinite(matrix))[0][0])
        raise _bad(f"'data[{i}]' holds a value that is not a finite number.")
    return matrix


def parse_npy(encoded: str, limits: AnomalySettings, *, features: list[str] | None = None) -> Rows:
    """The rows of a base64 NPY file (``"data": {"npy": ...}``): see :func:`read_npy`.
    Its size is bounded already: the base64 text is part of the body (``--max-request-bytes``)."""
    try:
        # strict_mode checks the alphabet and padding as b64decode(validate=True) does, while
        # decoding (b64decode runs a regular expression over the whole text first: ~1.3 ms
        # for 10,000 x 16 float64 rows)
        raw = binascii.a2b_base64(encoded, strict_mode=True)
    except (binascii.Error, ValueError):
        raise _bad("'data.npy' is not valid base64.") from None
    return read_npy(raw, limits, features=features, what="'data.npy'")


def read_npy(raw: bytes, limits: AnomalySettings, *, features: list[str] | None = None, what: str) -> Rows:
    """The rows of the NPY file ``raw`` (``what`` names it in refusals): like list rows,
    within the same bounds. The header (dtype, shape) is checked before any array is made,
    and nothing is unpickled: an object array is refused from its header, and the data is
    read as numbers (``np.frombuffer``), after checking that its size is what the header says."""
    stream = io.BytesIO(raw)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream, max_header_size=NPY_MAX_HEADER)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream, max_header_size=NPY_MAX_HEADER)
        else:
            raise _bad(f"{what} is an NPY file of format version {version}; send version 1.0 or 2.0.")
    except (ValueError, TypeError, OverflowError) as exc:
        raise _bad(f"{what} is not an NPY file ({exc}).") from None
    if dtype.hasobject:
        raise _bad(f"{what} holds Python objects (pickled data is never loaded); send a numeric array.")
    if dtype.kind not in "fiu" or dtype.fields is not None or dtype.subdtype is not None:
        raise _bad(f"{what} has dtype {dtype.str!r}; send integers or floats.")
    if len(shape) != 2:
        raise _bad(f"{what} has {len(shape)} dimensions (shape {shape}); send a 2-D array of rows x features.")
    n_rows, width = shape
    if n_rows > limits.anomaly_max_rows:
        raise _too_many_rows(n_rows, limits)
    if n_rows == 0:
        raise _bad(f"{what} has no rows.")
    _check_width(width, limits)
    if features is not None and width != len(features):
        raise _bad(f"{what} has {width} columns; the model's features are {features}.")
    needed = n_rows * width * dtype.itemsize
    if len(raw) - stream.tell() != needed:
        raise _bad(
            f"{what} holds {len(raw) - stream.tell()} bytes of data; its header ({shape}, {dtype.str}) needs {needed}."
        )
    # The values as they lie in the file's bytes, as np.lib.format.read_array reads them but
    # without copying them into a new array first (for C-ordered native float64, the usual
    # case, no copy at all: the rows stay a read-only view of the bytes). The same values
    # bit for bit; the size was checked against the header above.
    array = np.frombuffer(raw, dtype=dtype, count=n_rows * width, offset=stream.tell())
    array = array.reshape(shape[::-1]).T if fortran else array.reshape(shape)
    return Rows(_finite(np.ascontiguousarray(array, dtype=np.float64)), None, None)


def _too_many_rows(n: int, limits: AnomalySettings) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"'data' has {n} rows; this server accepts at most {limits.anomaly_max_rows} (--anomaly-max-rows).",
        param="data",
        code="too_many_rows",
    )
