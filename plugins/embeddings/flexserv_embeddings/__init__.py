"""OpenAI's embeddings API for FlexServ, and the contract of embedding backends.

A plugin (``POST /v1/embeddings``, see :mod:`flexserv_embeddings.plugin`) and a
library: a backend that serves embedding models depends on ``flexserv-embeddings``
and subclasses :class:`EmbeddingModel`. Importing this package stays cheap (no
Litestar, no numpy): backends import it at start-up.
"""

from flexserv_embeddings.model import EmbeddingLimits, EmbeddingModel, EmbeddingResult

__version__ = "0.1.0"

__all__ = ["EmbeddingLimits", "EmbeddingModel", "EmbeddingResult"]
