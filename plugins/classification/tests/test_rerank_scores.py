"""The bi-encoder reranker's scoring step, without a model."""

from __future__ import annotations

import numpy as np
from flexserv_classification.batched import Prepared
from flexserv_classification.rerankers import BiEncoderRerankModel, PairJob


def test_a_bi_encoder_score_stays_within_minus_one_and_one() -> None:
    """float32 rounding of normalised vectors can put a cosine a hair past 1: the
    documented range holds."""
    model = object.__new__(BiEncoderRerankModel)  # the scoring step alone, without a model
    vector = np.full(4, 0.50000006, dtype=np.float32)  # norm 1.0000001
    scores = model._finish(
        PairJob(pairs=[("q", "q"), ("q", "d")], truncate=True), Prepared(["q", "d"], 2), [vector, -vector]
    ).scores
    assert scores == [1.0, -1.0]
