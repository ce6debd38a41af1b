"""Settings of the anomaly plugin (``--anomaly-*``): input bounds, fit budget, store, streams."""

from __future__ import annotations

from typing import Annotated

import msgspec


class AnomalySettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    anomaly_max_rows: Annotated[
        int, msgspec.Meta(ge=2, description="Most rows (or texts) one fit, score, detect or stream request may carry.")
    ] = 100_000
    anomaly_max_features: Annotated[int, msgspec.Meta(ge=1, description="Most features (columns) a row may have.")] = (
        1024
    )
    anomaly_max_text_chars: Annotated[
        int, msgspec.Meta(ge=1, description="Longest text (in characters) an anomaly request may carry.")
    ] = 20_000
    anomaly_fit_timeout: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            description="Seconds a fit may run; past it the fit's worker process is stopped (504).",
            extra={"metavar": "SECONDS"},
        ),
    ] = 300.0
    anomaly_fit_workers: Annotated[
        int, msgspec.Meta(ge=1, description="Fits that run at once, each in its own worker process.")
    ] = 1
    anomaly_score_threads: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Threads a score or detect request of 8,192 rows or more is split across "
            "(row chunks scored at once, the same scores as one call; at most one per CPU). "
            "1 (the default): one call, as in-process.",
        ),
    ] = 1
    anomaly_max_model_bytes: Annotated[
        int, msgspec.Meta(ge=1024, description="Largest stored model (bytes: about 8 per training value) kept or read.")
    ] = 1 << 30
    anomaly_max_models: Annotated[
        int, msgspec.Meta(ge=1, description="Most fitted models the state store keeps (all owners); more get 429.")
    ] = 1000
    anomaly_max_store_bytes: Annotated[
        int, msgspec.Meta(ge=1024, description="Most bytes all stored anomaly models may take; more get 429.")
    ] = 20 << 30
    anomaly_embedding_model: Annotated[
        str | None,
        msgspec.Meta(description="Embedding model for text inputs (default: the server's default embedding model)."),
    ] = None
    anomaly_max_stream_detectors: Annotated[
        int, msgspec.Meta(ge=1, description="Most streaming detectors held at once (a new one beyond it gets 429).")
    ] = 64
    anomaly_max_stream_window: Annotated[
        int, msgspec.Meta(ge=50, description="Largest window_size a streaming detector may ask for.")
    ] = 20_000
    anomaly_max_stream_values: Annotated[
        int,
        msgspec.Meta(
            ge=50,
            description="Most values (window_size x features) one streaming detector's window may hold, 8 bytes"
            " each for as long as the detector lives; a detector asking for more gets a 400 on window_size.",
        ),
    ] = 2_000_000
