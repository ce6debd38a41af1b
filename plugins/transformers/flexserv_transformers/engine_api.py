"""The contract between the transformers text model and the engine that runs it.

:class:`~flexserv_transformers.model.TransformersTextModel` owns the
tokenizer, the chat template and incremental detokenization; an *engine* owns the
forward passes, the KV cache, scheduling and sampling. They meet here:

* The model wrapper builds an :class:`EngineModel` (the loaded ``PreTrainedModel``
  and the facts an engine needs about it) and calls the factory the ``--transformers-engine``
  setting names (:data:`ENGINES`): ``factory(engine_model, settings) -> Engine``.
  The factory runs in the loading worker thread (no event loop there); it may
  start threads and allocate caches.
* Per request the wrapper calls ``engine.generate(prompt_ids, params)`` on the
  event loop and iterates the returned async iterator of :class:`EngineToken`.
* ``engine.close()`` is called once, off the event loop, when the model unloads.

Rules every engine follows (``tests/test_transformers_engine_contract.py`` of this plugin
checks them against each registered engine):

1. Requests are validated once, by the API layer, against the model's
   ``TextLimits``, whose ``context_length`` is the engine's
   :attr:`Engine.max_sequence_tokens`. So ``generate`` may assume ``1 <=
   len(prompt_ids) < max_sequence_tokens`` and only ``assert`` it; it never
   raises a client error of its own (``TooManyRequests`` for a full queue is
   load, not validation). The engine ends a sequence with
   ``finish_reason="length"`` after ``params.max_tokens`` tokens or when prompt +
   completion reach ``max_sequence_tokens``, whichever comes first, or with
   ``"stop"`` on the token that is in ``EngineModel.eos_token_ids`` (that token is
   yielded, with its logprob, and is the last one). Exactly the last yielded
   token has a ``finish_reason``.
2. Forward passes never run on the event loop. Tokens reach the async side
   through thread-safe hand-off (``loop.call_soon_threadsafe``).
3. Closing the iterator early (``aclose()``, or the consumer being cancelled)
   cancels the sequence: it takes no further decode step after the one in flight,
   its KV cache is freed, and ``stats()["active_sequences"]`` drops accordingly.
4. Sampling follows :mod:`flexserv_transformers.sampling` (reuse
   it: it works on a batch): greedy when ``params.greedy``; a
   ``torch.Generator`` per request seeded from ``params.seed`` (never the global
   RNG); OpenAI presence/frequency penalties over the *generated* tokens only;
   logprobs as documented there.
5. Greedy output is token-for-token what ``model.generate(do_sample=False)``
   gives for the same weights and dtype (the parity tests hold every engine to it).
6. After ``close()`` a running ``generate`` raises
   :class:`flexserv_core.errors.ServiceUnavailable`; new calls raise it at once.
7. A sequence still waiting for its first step ``params.queue_timeout`` seconds
   after ``generate`` ends with :func:`queue_timeout_error` (503) and leaves the queue.

Adding an engine: write ``factory(engine_model, settings)`` returning an
:class:`Engine` and list it in :data:`ENGINES` (``"module:attribute"`` strings, so
nothing heavy is imported until the engine is chosen). An engine's own settings
(batch size, KV blocks...) are a ``msgspec.Struct`` of its own, named in its
:class:`EngineEntry` ``settings``; the transformers plugin declares it through
``flexserv_add_settings`` and the engine reads it with ``settings.get(Struct)``.
The settings module must be cheap to import (no torch): it is imported while the
command line is built.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec
from flexserv_batching import EngineToken

from flexserv_core import SamplingParams, ServiceUnavailable

if TYPE_CHECKING:
    import torch
    from flexserv_constraints import TokenMatcher

    from flexserv_core import Settings
    from flexserv_transformers.loading import CausalLM
    from flexserv_transformers.media import PromptMedia

__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "Engine",
    "EngineEntry",
    "EngineFactory",
    "EngineModel",
    "EngineToken",
    "engine_settings_structs",
    "load_engine_factory",
    "queue_timeout_error",
]


class EngineModel(msgspec.Struct, kw_only=True):
    """What an engine gets: the model in eval mode on its device, and facts about it.

    Attributes:
        model: a causal LM (``AutoModelForCausalLM``, or FlexServ's own Llama
            forward in the paged engine: ``flexserv_transformers.native``), already on ``device`` in ``dtype``.
        device: where it lives (``torch.device``).
        eos_token_ids: ids that end a sequence with ``"stop"`` (generation config
            and tokenizer together).
        context_length: prompt + completion limit (``max_position_embeddings``).
        vocab_size: the logits' last dimension.
        name: the model's name in the catalog (for logs and stats).
    """

    model: CausalLM
    device: torch.device
    eos_token_ids: frozenset[int]
    context_length: int
    vocab_size: int
    name: str = ""


@runtime_checkable
class Engine(Protocol):
    """Runs generation for one loaded model. See the module docstring for the rules."""

    @property
    def max_sequence_tokens(self) -> int:
        """Most tokens (prompt + completion) one sequence can hold: at most
        ``EngineModel.context_length``, less when the engine's cache is smaller.
        The model declares it as its context length, so requests never exceed it."""
        ...

    def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        grammar: TokenMatcher | None = None,
        *,
        media: PromptMedia | None = None,
    ) -> AsyncGenerator[EngineToken, None]:
        """Stream the tokens that complete ``prompt_ids`` (usually an ``async def``
        generator). Called on the event loop. ``grammar`` is the sequence's matcher
        when ``params.constraint`` is set: the engine hands it to its
        :class:`~flexserv_transformers.sampling.SamplerState`, which masks and advances it.
        ``media`` (vision-language models) holds the prompt's images: their features
        replace the embeddings of the image tokens at prefill (see :mod:`..media`)."""
        ...

    def stats(self) -> dict[str, Any]:
        """Cheap, JSON-able facts; must include ``"engine"`` (its name),
        ``"active_sequences"`` (sequences holding state now) and
        ``"waiting_sequences"`` (accepted, not started)."""
        ...

    def close(self) -> None:
        """Stop threads, fail pending requests, free caches. Idempotent; blocking."""
        ...


EngineFactory = Callable[["EngineModel", "Settings"], Engine]


class EngineEntry(msgspec.Struct, frozen=True):
    """Where an engine lives: ``"module:attribute"`` of its factory and, if it has
    settings, of its settings struct."""

    factory: str
    settings: str | None = None


#: Engines selectable with ``--transformers-engine``.
ENGINES: dict[str, EngineEntry] = {
    "simple": EngineEntry("flexserv_transformers.simple_engine:create_engine"),
    "paged": EngineEntry(
        "flexserv_transformers.engine.engine:create_engine",
        settings="flexserv_transformers.engine.settings:EngineSettings",
    ),
}
#: The engine used when ``--transformers-engine`` is not given.
DEFAULT_ENGINE = "paged"


def _import(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def load_engine_factory(name: str) -> EngineFactory:
    """The factory of engine ``name``; ``KeyError`` if there is none."""
    return _import(ENGINES[name].factory)  # type: ignore[no-any-return]


def engine_settings_structs() -> list[type[msgspec.Struct]]:
    """The settings structs of all engines (declared by the transformers plugin)."""
    return [_import(e.settings) for e in ENGINES.values() if e.settings]


def queue_timeout_error(seconds: float, retry_after: float) -> ServiceUnavailable:
    """What a request gets when it waited ``seconds`` (its ``queue_timeout``) without starting."""
    return ServiceUnavailable(
        f"The request waited in the queue past queue_timeout ({seconds:g} s); the server is busy, retry shortly.",
        code="queue_timeout",
        headers={"Retry-After": str(max(1, round(retry_after)))},
    )
