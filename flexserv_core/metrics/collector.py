"""Gauges and engine counters read at scrape time from the registry and the models.

Nothing here is updated per request: each scrape asks the model registry how
many requests hold or wait for each model, and each resident model for its
:class:`~flexserv_core.backends.base.EngineStats` (the backend-neutral way an
engine's numbers reach ``/metrics``; the core never imports a plugin).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from flexserv_core.backends.base import EngineStats
from flexserv_core.metrics.core import MODEL, PREFIX
from flexserv_core.models.registry import ModelRegistry

log = logging.getLogger(__name__)


class RegistryCollector(Collector):
    """Requests running/waiting per model, resident models, and engine statistics."""

    def __init__(self, registry: ModelRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        running = GaugeMetricFamily(
            f"{PREFIX}num_requests_running", "Requests being served by a loaded model.", labels=[MODEL]
        )
        waiting = GaugeMetricFamily(
            f"{PREFIX}num_requests_waiting",
            "Requests waiting for their model to load or queued in its engine.",
            labels=[MODEL],
        )
        loaded = GaugeMetricFamily(
            f"{PREFIX}model_loaded", "1 for each model resident and ready.", labels=[MODEL, "kind"]
        )
        kv_usage = GaugeMetricFamily(
            f"{PREFIX}kv_cache_usage_perc", "Fraction of the KV cache in use (1 = full).", labels=[MODEL]
        )
        kv_resident = GaugeMetricFamily(
            f"{PREFIX}kv_cache_resident_perc",
            "Fraction of the KV cache's budget resident in memory (written at least once).",
            labels=[MODEL],
        )
        queries = CounterMetricFamily(
            f"{PREFIX}prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", labels=[MODEL]
        )
        hits = CounterMetricFamily(
            f"{PREFIX}prefix_cache_hits", "Prompt tokens found in the prefix cache.", labels=[MODEL]
        )
        preemptions = CounterMetricFamily(
            f"{PREFIX}num_preemptions", "Sequences preempted by the engine (recomputed later).", labels=[MODEL]
        )
        drafted = CounterMetricFamily(
            f"{PREFIX}spec_decode_num_draft_tokens",
            "Speculative draft tokens verified by the engine.",
            labels=[MODEL],
        )
        accepted = CounterMetricFamily(
            f"{PREFIX}spec_decode_num_accepted_tokens",
            "Speculative draft tokens accepted (emitted without a forward pass of their own).",
            labels=[MODEL],
        )
        batches = CounterMetricFamily(
            f"{PREFIX}micro_batches",
            "Micro-batches run by a batching model (embeddings, rerank, classify).",
            labels=[MODEL],
        )
        batch_items = CounterMetricFamily(
            f"{PREFIX}micro_batch_items",
            "Inputs those micro-batches held (over micro_batches: the mean batch size).",
            labels=[MODEL],
        )
        counts = self.registry.request_counts()
        names = [s.name for s in self.registry.catalog.specs()]
        names += [n for n in counts if n not in names]
        for name in names:
            n_running, n_waiting = counts.get(name, (0, 0))
            stats = self._stats(name)
            if stats is not None:
                queued = min(stats.requests_waiting, n_running)
                n_running, n_waiting = n_running - queued, n_waiting + queued
                if stats.kv_cache_usage is not None:
                    kv_usage.add_metric([name], stats.kv_cache_usage)
                if stats.kv_cache_resident is not None:
                    kv_resident.add_metric([name], stats.kv_cache_resident)
                queries.add_metric([name], stats.prefix_cache_queries)
                hits.add_metric([name], stats.prefix_cache_hits)
                preemptions.add_metric([name], stats.preemptions)
                drafted.add_metric([name], stats.spec_decode_draft_tokens)
                accepted.add_metric([name], stats.spec_decode_accepted_tokens)
                if stats.micro_batches is not None and stats.micro_batch_items is not None:
                    batches.add_metric([name], stats.micro_batches)
                    batch_items.add_metric([name], stats.micro_batch_items)
            running.add_metric([name], n_running)
            waiting.add_metric([name], n_waiting)
        for info in self.registry.loaded():
            loaded.add_metric([info.model_id, str(info.kind)], 1)
        yield from (
            running,
            waiting,
            loaded,
            kv_usage,
            kv_resident,
            queries,
            hits,
            preemptions,
            drafted,
            accepted,
            batches,
            batch_items,
        )

    def _stats(self, name: str) -> EngineStats | None:
        model = self.registry.model_if_loaded(name)
        if model is None:
            return None
        try:
            stats = model.stats()
        except Exception:  # a scrape must not fail because one engine did
            log.exception("model '%s': stats() failed", name)
            return None
        return stats if isinstance(stats, EngineStats) else None
