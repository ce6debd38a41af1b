"""``flexserv:embedding_inputs_total`` and ``flexserv:embedding_tokens_total`` on ``/metrics``.

prometheus_client counters (safe to increment from any thread), one pair per app: the
metrics hook registers them before the server exists and the route finds the same
ones in the app's ``settings.state``.
"""

from __future__ import annotations

from typing import NamedTuple

from prometheus_client import Counter

from flexserv_core import Settings, StashKey


class EmbeddingCounters(NamedTuple):
    #: Inputs embedded (texts or token lists), by model.
    inputs: Counter
    #: Tokens embedded (as the responses' ``usage``), by model.
    tokens: Counter


_COUNTERS = StashKey[EmbeddingCounters]("flexserv_embeddings: counters")


def embedding_counters(settings: Settings) -> EmbeddingCounters:
    return settings.state.get_or_create(
        _COUNTERS,
        lambda: EmbeddingCounters(
            Counter(
                "flexserv:embedding_inputs", "Inputs embedded (texts or token lists).", ["model_name"], registry=None
            ),
            Counter(
                "flexserv:embedding_tokens", "Tokens embedded (as the responses' usage).", ["model_name"], registry=None
            ),
        ),
    )
