"""Log output: text or JSON lines, every record tagged with its request's id."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Final, Literal

from flexserv_core.edge.request_id import current_request_id

TEXT_FORMAT: Final = "%(asctime)s %(levelname)-7s %(name)s [%(request_id)s]: %(message)s"
# uvicorn.access records carry (client, method, path, http version, status) as args.
_ACCESS_FIELDS: Final = ("client", "method", "path", "http_version", "status")


class RequestIdFilter(logging.Filter):
    """Sets ``record.request_id`` (``"-"`` outside a request); never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = current_request_id() or "-"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, request_id (and the
    access log's fields, an exception's traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None) or current_request_id(),
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            entry.update(zip(_ACCESS_FIELDS, record.args, strict=True))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class CurrentStderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted, not the stream that
    was current when logging was configured: a CLI run in-process (tests, embedding
    applications) may replace ``sys.stderr`` and close the old one afterwards."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def configure_logging(level: str, log_format: Literal["text", "json"] = "text") -> None:
    """Replace the root handlers with one stderr handler in ``log_format``; uvicorn's
    loggers (access log included) propagate to it."""
    handler = CurrentStderrHandler()
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
