"""The model kinds this plugin adds and the typed models that serve them.

Kinds are plain strings (the core's vocabulary is open): a backend declares one
of these and the registry lists, loads, expires and evicts its models like any
other. The routes only talk to these abstract classes, so another backend (ONNX,
a remote service...) can serve the same routes by subclassing them.
"""

from __future__ import annotations

import abc
from typing import Literal

import msgspec

from flexserv_core import LoadedModel

RERANK = "rerank"
CLASSIFY = "classify"
TOKEN_CLASSIFY = "token-classify"

#: How sub-word predictions become entities; the strategies of transformers'
#: token-classification pipeline.
Aggregation = Literal["none", "simple", "first", "max", "average"]
AGGREGATIONS: tuple[str, ...] = ("none", "simple", "first", "max", "average")


class ScoreResult(msgspec.Struct):
    """One relevance score per (query, document) pair, in order; ``prompt_tokens``: total."""

    scores: list[float]
    prompt_tokens: int


class ClassificationResult(msgspec.Struct):
    """One probability distribution over the model's labels per input."""

    probs: list[list[float]]
    prompt_tokens: int


class Entity(msgspec.Struct, kw_only=True):
    """A labelled span: ``text[start:end]`` is the span of the input it covers.

    ``entity`` is the label (``B-PER`` with aggregation ``none``, ``PER`` when
    grouped); ``index`` is the token position (aggregation ``none`` only).
    """

    entity: str
    score: float
    start: int
    end: int
    word: str
    index: int | None = None


class TokenClassificationResult(msgspec.Struct):
    entities: list[list[Entity]]
    prompt_tokens: int


class _InputLimited(LoadedModel):
    #: Longest input (in tokens, with special tokens) the model reads.
    max_input_tokens: int


class RerankModel(_InputLimited):
    """Scores how relevant each document is to a query (a cross-encoder, or cosine
    similarity of a bi-encoder's embeddings). Higher is more relevant."""

    kind = RERANK

    @abc.abstractmethod
    async def score(self, pairs: list[tuple[str, str]], *, truncate: bool = True) -> ScoreResult:
        """Score each ``(query, document)`` pair. With ``truncate=False`` a pair
        longer than ``max_input_tokens`` raises
        :class:`flexserv_core.errors.ContextLengthExceeded` naming the input."""


class ClassificationModel(_InputLimited):
    """A sequence classifier over a fixed list of labels."""

    kind = CLASSIFY

    #: Label names, in the order of the probabilities.
    labels: list[str]

    @abc.abstractmethod
    async def classify(self, texts: list[str], *, truncate: bool = True) -> ClassificationResult:
        """Probabilities of every label for each text (summing to 1, or independent
        sigmoids for multi-label models)."""


class TokenClassificationModel(_InputLimited):
    """Labels each token of a text (named-entity recognition, POS tagging...)."""

    kind = TOKEN_CLASSIFY

    labels: list[str]

    @abc.abstractmethod
    async def classify_tokens(
        self, texts: list[str], *, aggregation: Aggregation = "simple", truncate: bool = True
    ) -> TokenClassificationResult:
        """Entities of each text (the label ``O`` is left out), with character offsets
        into that text."""
