"""How long each model's last load took on this machine, so that the start-up log can say
what a model's first request will wait for.

Models load on first use: the first request to a model waits for its load (seconds for
the embedded models, minutes for a large checkpoint converted on first use). The
registry's ``loaded`` events carry that time; it is kept per model name and source in
``load-times.json`` in the cache directory (the latest :data:`MAX_MODELS`), written whole
and renamed into place (a reader never sees half a file, and of two servers writing at
once the later wins). A file that cannot be read or written costs nothing but the figure.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from pathlib import Path

from flexserv_core.models.spec import ModelSpec
from flexserv_core.settings import Settings, default_cache_dir

log = logging.getLogger(__name__)

FILE_NAME = "load-times.json"
#: Models kept, the most recently loaded: sources in throwaway directories (tests,
#: experiments) would otherwise grow the file without end.
MAX_MODELS = 256


class LoadHistory:
    """Seconds of each model's last successful load, read from and written to ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    @staticmethod
    def _key(spec: ModelSpec) -> str:
        return f"{spec.name}\n{spec.source}"

    def _read(self) -> dict[str, float]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: float(v) for k, v in data.items() if isinstance(v, int | float) and v >= 0}

    def last(self, spec: ModelSpec) -> float | None:
        """The seconds ``spec``'s last load took here, or ``None`` if it never loaded here."""
        return self._read().get(self._key(spec))

    def record(self, spec: ModelSpec, seconds: float) -> None:
        """Keep ``seconds`` as ``spec``'s last load time. Blocking (a small file write)."""
        with self._lock:
            times = self._read()
            times.pop(self._key(spec), None)  # the file is in load order: the latest last
            times[self._key(spec)] = round(seconds, 2)
            times = dict(list(times.items())[-MAX_MODELS:])
            temporary: str | None = None
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd, temporary = tempfile.mkstemp(prefix=".load-times-", dir=self.path.parent)
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    json.dump(times, out, indent=0)
                os.replace(temporary, self.path)
            except OSError as exc:
                log.debug("could not keep the load time of '%s' in %s: %s", spec.name, self.path, exc)
                if temporary is not None:
                    Path(temporary).unlink(missing_ok=True)


def load_history(settings: Settings) -> LoadHistory:
    """The history in ``settings``' cache directory."""
    return LoadHistory(default_cache_dir(settings) / FILE_NAME)


def first_request_note(history: LoadHistory, spec: ModelSpec, preloaded: bool) -> str:
    """What the start-up log adds to a served model's line about its first request."""
    if preloaded:
        return "loading now (--preload)"
    last = history.last(spec)
    if last is None:
        return "loads on its first request (not loaded on this machine before)"
    return f"loads on its first request ({last:.1f} s last time)"
