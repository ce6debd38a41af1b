"""``flexserv:ocr_pages_total`` and ``flexserv:ocr_seconds_total`` on ``/metrics``.

prometheus_client counters (safe to increment from any thread), one pair per app: the
metrics hook registers them before the server exists and the routes find the same
ones in the app's ``settings.state``.
"""

from __future__ import annotations

from typing import NamedTuple

from prometheus_client import Counter

from flexserv_core import Settings, StashKey


class OcrCounters(NamedTuple):
    #: Pages read, by model and source (``ocr``, ``text_layer`` or ``image``).
    pages: Counter
    #: Seconds the OCR engines spent, by model.
    seconds: Counter

    def page_read(self, model: str, source: str, seconds: float) -> None:
        self.pages.labels(model, source).inc()
        if source == "ocr":
            self.seconds.labels(model).inc(seconds)


_COUNTERS = StashKey[OcrCounters]("flexserv_ocr: counters")


def ocr_counters(settings: Settings) -> OcrCounters:
    return settings.state.get_or_create(
        _COUNTERS,
        lambda: OcrCounters(
            Counter(
                "flexserv:ocr_pages",
                "Document pages read, by model and source "
                "(ocr, text_layer, or image: sent to a vision-language model).",
                ["model", "source"],
                registry=None,
            ),
            Counter("flexserv:ocr_seconds", "Seconds the OCR engines spent reading pages.", ["model"], registry=None),
        ),
    )
