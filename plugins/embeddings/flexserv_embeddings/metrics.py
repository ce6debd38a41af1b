"""``flexserv:embedding_inputs_total`` and ``flexserv:embedding_tokens_total`` on ``/metrics``."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any

from flexserv_core import Settings


class EmbeddingCounts:
    """Inputs embedded and their tokens (as the responses' ``usage``), by model."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.inputs: dict[str, int] = {}
        self.tokens: dict[str, int] = {}

    def add(self, model: str, inputs: int, tokens: int) -> None:
        with self._lock:
            self.inputs[model] = self.inputs.get(model, 0) + inputs
            self.tokens[model] = self.tokens.get(model, 0) + tokens

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        with self._lock:
            inputs, tokens = dict(self.inputs), dict(self.tokens)
        for name, doc, values in (
            ("flexserv:embedding_inputs", "Inputs embedded (texts or token lists).", inputs),
            ("flexserv:embedding_tokens", "Tokens embedded (as the responses' usage).", tokens),
        ):
            family = CounterMetricFamily(name, doc, labels=["model_name"])
            for model, value in sorted(values.items()):
                family.add_metric([model], value)
            yield family


#: One set of counters per app: the metrics hook makes it before the server exists,
#: and the route finds it again through the server's settings.
_COUNTS: weakref.WeakKeyDictionary[Settings, EmbeddingCounts] = weakref.WeakKeyDictionary()


def counts_for(settings: Settings) -> EmbeddingCounts:
    counts = _COUNTS.get(settings)
    if counts is None:
        counts = _COUNTS[settings] = EmbeddingCounts()
    return counts
