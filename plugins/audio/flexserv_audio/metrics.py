"""``flexserv:transcription_audio_seconds_total`` on ``/metrics``."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any

from flexserv_core import Settings


class AudioCounts:
    """Seconds of audio transcribed or translated, by model."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds: dict[str, float] = {}

    def add(self, model: str, seconds: float) -> None:
        with self._lock:
            self.seconds[model] = self.seconds.get(model, 0.0) + seconds

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        with self._lock:
            seconds = dict(self.seconds)
        family = CounterMetricFamily(
            "flexserv:transcription_audio_seconds", "Seconds of audio transcribed.", labels=["model_name"]
        )
        for model, value in sorted(seconds.items()):
            family.add_metric([model], value)
        yield family


#: One set of counters per app: the metrics hook makes it before the server exists,
#: and the routes find it again through the server's settings.
_COUNTS: weakref.WeakKeyDictionary[Settings, AudioCounts] = weakref.WeakKeyDictionary()


def counts_for(settings: Settings) -> AudioCounts:
    counts = _COUNTS.get(settings)
    if counts is None:
        counts = _COUNTS[settings] = AudioCounts()
    return counts
