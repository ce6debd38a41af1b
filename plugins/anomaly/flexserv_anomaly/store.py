"""Where fitted models live: one small interface, ``put`` / ``get`` / ``delete`` /
``list`` of ``(header, blob)`` pairs by model name.

:class:`FileStore` keeps one file per model under ``<cache_dir>/anomaly``:
an 8-byte magic, the header's length, the JSON header, then the NPZ blob.
Writes go to a temporary file in the same directory and are renamed over the
old one, so a reader sees the old file or the new one, never half of one.
Names are checked, never cleaned up: a name that is not a plain identifier is a
400 (two names must never map to one file), and the path is built by the server.
"""

from __future__ import annotations

import json
import os
import re
import struct
import tempfile
from pathlib import Path
from typing import Any, Protocol

from flexserv_anomaly.codec import CorruptModel

MAGIC = b"FSANOM1\n"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_SUFFIX = ".fsad"
_HEADER_MAX = 1 << 20


class BadName(ValueError):
    pass


def check_name(name: str) -> str:
    """``name`` if it is a safe model id: letters, digits, ``_ . -``, starting with a
    letter or digit, at most 128 characters, no ``..``; otherwise :class:`BadName`."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise BadName(
            f"{name!r} is not a valid anomaly model name: use 1-128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit, without '..'."
        )
    return name


class ModelStore(Protocol):
    def put(self, name: str, header: dict[str, Any], blob: bytes) -> None: ...

    def get(self, name: str) -> tuple[dict[str, Any], bytes] | None: ...

    def exists(self, name: str) -> bool: ...

    def delete(self, name: str) -> bool: ...

    def list(self) -> list[dict[str, Any]]: ...


class FileStore:
    def __init__(self, root: Path, *, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes

    def _path(self, name: str) -> Path:
        return self.root / f"{check_name(name)}{_SUFFIX}"

    def put(self, name: str, header: dict[str, Any], blob: bytes) -> None:
        path = self._path(name)
        head = json.dumps(header, allow_nan=False).encode()
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=_SUFFIX)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(MAGIC + struct.pack(">Q", len(head)) + head)
                out.write(blob)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _read(self, path: Path, *, header_only: bool) -> tuple[dict[str, Any], bytes]:
        size = path.stat().st_size
        if size > self.max_bytes:
            raise CorruptModel(f"it is {size} bytes, more than the limit of {self.max_bytes}")
        with path.open("rb") as f:
            if f.read(len(MAGIC)) != MAGIC:
                raise CorruptModel(
                    "it does not start with the FlexServ anomaly model signature (a pickle or joblib file?)"
                )
            raw_length = f.read(8)
            if len(raw_length) != 8:
                raise CorruptModel("it is truncated")
            (length,) = struct.unpack(">Q", raw_length)
            if length > _HEADER_MAX:
                raise CorruptModel("its header is too long")
            try:
                header = json.loads(f.read(length))
            except (UnicodeDecodeError, json.JSONDecodeError):
                raise CorruptModel("its header is not valid JSON") from None
            if not isinstance(header, dict):
                raise CorruptModel("its header is not a JSON object")
            return header, b"" if header_only else f.read()

    def get(self, name: str) -> tuple[dict[str, Any], bytes] | None:
        path = self._path(name)
        try:
            return self._read(path, header_only=False)
        except FileNotFoundError:
            return None

    def exists(self, name: str) -> bool:
        return self._path(name).is_file()

    def delete(self, name: str) -> bool:
        try:
            self._path(name).unlink()
        except FileNotFoundError:
            return False
        return True

    def list(self) -> list[dict[str, Any]]:
        """One entry per stored model, by name; unreadable ones say why in ``error``."""
        out: list[dict[str, Any]] = []
        if not self.root.is_dir():
            return out
        for path in sorted(self.root.glob(f"*{_SUFFIX}")):
            name = path.name[: -len(_SUFFIX)]
            if not _NAME.match(name):
                continue  # temporary files and anything not written by put
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            entry: dict[str, Any] = {"name": name, "size_bytes": stat.st_size, "modified": stat.st_mtime}
            try:
                entry["header"] = self._read(path, header_only=True)[0]
            except (CorruptModel, OSError) as exc:
                entry["header"], entry["error"] = None, str(exc)
            out.append(entry)
        return out
