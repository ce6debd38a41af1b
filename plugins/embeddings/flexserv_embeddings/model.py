"""The contract an embedding backend implements: :class:`EmbeddingModel`."""

from __future__ import annotations

import abc

import msgspec

from flexserv_core import LoadedModel, ModelKind


class EmbeddingResult(msgspec.Struct):
    """``vectors``: one list of floats per input, L2-normalised; ``prompt_tokens``: total."""

    vectors: list[list[float]]
    prompt_tokens: int


class EmbeddingLimits(msgspec.Struct, frozen=True, kw_only=True):
    """What an embedding model declares so that the route checks requests against it
    before ``embed`` runs (token-id inputs: their ids and, untruncated, their length)."""

    #: The longest input the model embeds, in its tokens (special tokens included).
    max_input_tokens: int
    #: The number of token ids it knows (``None``: not declared, ids are not checked).
    vocab_size: int | None = None


class EmbeddingModel(LoadedModel):
    kind = ModelKind.EMBEDDING

    dimensions: int
    max_input_tokens: int
    #: Declared by the backend when it knows it: token-id inputs with an id at or
    #: past it are a 400 from the route, before ``embed`` is called.
    vocab_size: int | None = None
    #: Whether the model was trained for shortened vectors (Matryoshka): only then may a
    #: request's ``dimensions`` cut them; a cut vector of any other model loses its
    #: meaning, so ``dimensions`` below :attr:`dimensions` is a 400 there.
    is_matryoshka: bool = False
    #: The sizes a Matryoshka model was trained for, when it says (``None``: any size).
    matryoshka_dimensions: tuple[int, ...] | None = None

    @property
    def limits(self) -> EmbeddingLimits:
        return EmbeddingLimits(max_input_tokens=self.max_input_tokens, vocab_size=self.vocab_size)

    @abc.abstractmethod
    async def embed(self, inputs: list[str] | list[list[int]], *, truncate: bool = True) -> EmbeddingResult:
        """Embed a batch of texts or token-id lists, already checked against
        :attr:`limits` (token ids within the vocabulary; with ``truncate=False``, no
        token-id list longer than ``max_input_tokens``). With ``truncate=False`` an
        input longer than ``max_input_tokens`` once tokenized (a text, or token ids
        with the special tokens the model adds) raises
        :class:`flexserv_core.ContextLengthExceeded`."""
