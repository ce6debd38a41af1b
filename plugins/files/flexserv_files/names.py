"""Client-given names and ids: checked, never used as paths."""

from __future__ import annotations

import re
import unicodedata

from flexserv_core import InvalidRequest, NotFound

ID_PREFIX = "file-"
FILE_ID = re.compile(r"file-[0-9a-f]{32}")
MAX_FILENAME = 255


def check_filename(name: str | None) -> str:
    """The upload's filename, kept only as metadata: a plain name, never a path."""
    if not name or not name.strip():
        raise InvalidRequest("The 'file' part has no filename.", param="file", code="invalid_filename")
    if len(name) > MAX_FILENAME:
        raise InvalidRequest(
            f"The filename is {len(name)} characters long; at most {MAX_FILENAME}.",
            param="file",
            code="invalid_filename",
        )
    # category Cc: C0, DEL and the C1 controls (U+0080 to U+009F)
    if "/" in name or "\\" in name or name in (".", "..") or any(unicodedata.category(c) == "Cc" for c in name):
        raise InvalidRequest(
            "The filename must be a plain name: no '/', '\\', '..' or control characters.",
            param="file",
            code="invalid_filename",
        )
    return name


def check_file_id(file_id: str, param: str = "file_id") -> str:
    """400 for anything that is not an id this server makes (a path, ``../``, a URL)."""
    if not FILE_ID.fullmatch(file_id):
        raise InvalidRequest(
            f"'{file_id[:80]}' is not a file id (file- and 32 hex digits).", param=param, code="invalid_file_id"
        )
    return file_id


def not_found(file_id: str, param: str = "file_id") -> NotFound:
    return NotFound(f"No such file: '{file_id}'.", param=param, code="file_not_found")
