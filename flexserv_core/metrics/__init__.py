"""Prometheus metrics: the registry of one server, what the core records, ``GET /metrics``.

Internal to the core (plugins add collectors through ``flexserv_metrics_collectors``
and expose engine numbers through ``LoadedModel.stats()``). Importing
``flexserv_core`` does not import this package, so ``prometheus_client`` is only
loaded when an app is built.
"""
