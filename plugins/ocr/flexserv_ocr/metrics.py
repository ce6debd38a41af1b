"""``flexserv:ocr_pages_total`` and ``flexserv:ocr_seconds_total`` on ``/metrics``."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any

from flexserv_core import Settings


class OcrCounts:
    """Pages read (by model and source: ``ocr``, ``text_layer`` or ``image``) and engine seconds (by model)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pages: dict[tuple[str, str], int] = {}
        self.seconds: dict[str, float] = {}

    def add(self, model: str, source: str, seconds: float) -> None:
        with self._lock:
            self.pages[(model, source)] = self.pages.get((model, source), 0) + 1
            if source == "ocr":
                self.seconds[model] = self.seconds.get(model, 0.0) + seconds

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        with self._lock:
            pages, seconds = dict(self.pages), dict(self.seconds)
        family = CounterMetricFamily(
            "flexserv:ocr_pages",
            "Document pages read, by model and source (ocr, text_layer, or image: sent to a vision-language model).",
            labels=["model", "source"],
        )
        for (model, source), count in sorted(pages.items()):
            family.add_metric([model, source], count)
        yield family
        spent = CounterMetricFamily(
            "flexserv:ocr_seconds", "Seconds the OCR engines spent reading pages.", labels=["model"]
        )
        for model, value in sorted(seconds.items()):
            spent.add_metric([model], value)
        yield spent


#: One set of counters per app: the metrics hook makes it before the server exists,
#: and the routes find it again through the server's settings.
_COUNTS: weakref.WeakKeyDictionary[Settings, OcrCounts] = weakref.WeakKeyDictionary()


def counts_for(settings: Settings) -> OcrCounts:
    counts = _COUNTS.get(settings)
    if counts is None:
        counts = _COUNTS[settings] = OcrCounts()
    return counts
