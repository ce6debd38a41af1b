"""The loaded GGUF: tokenizer side here (on the event loop or worker threads),
decoding in the :class:`~flexserv_llamacpp.engine.LlamaEngine` thread."""

from __future__ import annotations

import codecs
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from flexserv_chat_templates import ChatTemplates, LiteralSpecials, render_chat_template, select_chat_template
from flexserv_constraints import ConstraintVocabulary

from flexserv_core import (
    SAMPLING_EXTENSIONS,
    EngineStats,
    InvalidRequest,
    ModelSpec,
    SamplingParams,
    TextGenerationModel,
    TextLimits,
    TokenDelta,
    TopLogprob,
    check_prompt_text,
    reserved_template_names,
)
from flexserv_llamacpp.binding import LlamaRuntime
from flexserv_llamacpp.engine import LlamaEngine
from flexserv_llamacpp.token_bound import token_bound

log = logging.getLogger(__name__)

#: The vocabulary's special tokens a chat template may name, by llama.cpp accessor.
_TEMPLATE_TOKENS = {"bos_token": "bos", "eos_token": "eos", "pad_token": "pad", "sep_token": "sep"}


def constraint_vocabulary(runtime: LlamaRuntime) -> ConstraintVocabulary | None:
    """The vocabulary as the platform's constraint service sees it: every token's
    bytes (control tokens as their text) and llama.cpp's own tokenizer, built on
    the first constrained request. ``None`` for a vocabulary without an
    end-of-generation token (a constraint could never end)."""
    eog = sorted(runtime.eog_tokens)
    if not eog:
        return None
    first = [t for t in (runtime.special_id("eos"), runtime.special_id("eot")) if t is not None and t in eog]
    return ConstraintVocabulary.from_tokens(
        lambda: [runtime.piece(t, special=True) for t in range(runtime.n_vocab)],
        encode=lambda data: runtime.tokenize(data, add_special=False, parse_special=False),
        eos_token_ids=list(dict.fromkeys([*first, *eog])),
        bos_token_id=runtime.special_id("bos"),
        special_token_ids=list(runtime.control_tokens),
        vocab_size=runtime.n_vocab,
    )


class LlamaCppTextModel(TextGenerationModel):
    """A GGUF served by llama.cpp with continuous batching."""

    #: all of them, in :mod:`flexserv_llamacpp.sampling`
    sampling_extensions = frozenset(SAMPLING_EXTENSIONS)

    def __init__(
        self,
        spec: ModelSpec,
        runtime: LlamaRuntime,
        *,
        chat_template: str | None,
        context_length: int,
        default_max_tokens: int,
        max_queued: int,
        prefix_caching: bool,
        max_draft: int = 0,
    ) -> None:
        super().__init__(spec, device="cpu", dtype="gguf")
        self.runtime: LlamaRuntime | None = runtime
        self.chat_template = chat_template
        self._templates = ChatTemplates()
        self.special_tokens = {
            name: text for name, which in _TEMPLATE_TOKENS.items() if (text := runtime.special_token(which))
        }
        # a client's text that spells a control token stays text (flexserv_chat_templates.literal)
        self._literals = LiteralSpecials(text for t in runtime.control_tokens if (text := runtime.token_text(t)))
        self.vocab_size = runtime.n_vocab
        bound = token_bound(runtime)
        self.limits = TextLimits(
            context_length=context_length,
            vocab_size=runtime.n_vocab,
            default_max_tokens=default_max_tokens,
            max_token_bytes=bound.max_token_bytes,
            dropped_bytes=bound.dropped_bytes,
        )
        self.constraint_vocabulary = constraint_vocabulary(runtime)
        self.engine = LlamaEngine(
            runtime,
            context_length=context_length,
            max_queued=max_queued,
            prefix_caching=prefix_caching,
            max_draft=max_draft,
            name=spec.name,
        )

    def _runtime(self) -> LlamaRuntime:
        if self.runtime is None:
            raise InvalidRequest(f"The model '{self.spec.name}' is unloaded.")
        return self.runtime

    # -- prompts --------------------------------------------------------------------

    def render_chat(self, messages: list[dict[str, Any]], template_kwargs: dict[str, Any]) -> list[int]:
        return self._render(messages, template_kwargs, bounded=False)

    def render_chat_for_generation(self, messages: list[dict[str, Any]], template_kwargs: dict[str, Any]) -> list[int]:
        return self._render(messages, template_kwargs, bounded=True)

    def _render(self, messages: list[dict[str, Any]], template_kwargs: dict[str, Any], *, bounded: bool) -> list[int]:
        """The chat prompt's ids; ``bounded``: a text that certainly overflows the
        context is refused before it is tokenized (``limits.max_token_bytes``)."""
        if not self.chat_template:
            raise InvalidRequest(
                f"The model '{self.spec.name}' has no chat template; use /v1/completions with a raw prompt.",
                param="messages",
            )
        assert not reserved_template_names(template_kwargs), "the core's one merge refuses reserved names"
        (messages, variables), found = self._literals.protect((messages, dict(template_kwargs)))
        tools = variables.pop("tools", None)
        documents = variables.pop("documents", None)
        try:
            source = select_chat_template(self.chat_template, None, tools)
            text = render_chat_template(
                self._templates.get(source),
                messages,
                add_generation_prompt=True,
                special_tokens=self.special_tokens,
                tools=tools,
                documents=documents,
                variables=variables,
            )
        except Exception as exc:  # jinja errors, raise_exception() in templates, bad message shapes
            raise InvalidRequest(
                f"The chat template of '{self.spec.name}' rejected the messages: {exc}", param="messages"
            ) from exc
        if bounded:  # measured as it is tokenized: held special-token texts back in place
            check_prompt_text(self.limits, LiteralSpecials.restored(text, found) if found else text, "messages")
        # the template writes the special tokens it wants (BOS included): add none
        runtime = self._runtime()
        if found:
            return LiteralSpecials.tokenize(text, found, lambda piece: runtime.tokenize(piece, add_special=False))
        return runtime.tokenize(text, add_special=False)

    def encode(self, text: str) -> list[int]:
        return self._runtime().tokenize(text, add_special=True)

    def tokenize(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return self._runtime().tokenize(text, add_special=add_special_tokens)

    def decode(self, token_ids: list[int]) -> str:
        runtime = self._runtime()
        return b"".join(runtime.piece(t) for t in token_ids).decode(errors="replace")

    def token_text(self, token_id: int) -> str:
        return self._runtime().piece(token_id, special=True).decode(errors="replace")

    # -- generation -----------------------------------------------------------------

    async def prepare(self, params: SamplingParams) -> None:
        if params.logit_bias:
            bad = [t for t in params.logit_bias if not 0 <= t < self.vocab_size]
            if bad:
                raise InvalidRequest(
                    f"logit_bias has token id {bad[0]}, outside this model's vocabulary [0, {self.vocab_size}).",
                    param="logit_bias",
                )

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[TokenDelta]:
        assert prompt_ids and len(prompt_ids) + params.max_tokens <= self.limits.context_length
        runtime = self._runtime()
        seq = self.engine.submit(prompt_ids, params)
        text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        async with aclosing(self.engine.stream(seq)) as tokens:
            async for token in tokens:
                if token.finish_reason == "stop" and token.token_id in runtime.eog_tokens:
                    piece = text.decode(b"", final=True)
                else:
                    piece = text.decode(runtime.piece(token.token_id), final=token.finish_reason is not None)
                top = None
                if token.top_logprobs is not None:
                    top = [TopLogprob(token_id=i, token=self.token_text(i), logprob=lp) for i, lp in token.top_logprobs]
                yield TokenDelta(
                    token_id=token.token_id,
                    text=piece,
                    logprob=token.logprob,
                    top_logprobs=top,
                    finish_reason=token.finish_reason,
                )

    # -- lifecycle ------------------------------------------------------------------

    @property
    def failure(self) -> str | None:
        return self.engine.failure

    def stats(self) -> EngineStats:
        raw = self.engine.stats()
        return EngineStats(
            requests_waiting=int(raw["waiting"]),
            kv_cache_usage=raw["kv_cells_used"] / raw["kv_cells"] if raw["kv_cells"] else None,
            prefix_cache_queries=int(raw["prompt_tokens"]),
            prefix_cache_hits=int(raw["prompt_tokens_reused"]),
            spec_decode_draft_tokens=int(raw["drafted_tokens"]),
            spec_decode_accepted_tokens=int(raw["accepted_tokens"]),
        )

    def unload(self) -> None:
        if not self.engine.close():
            log.error("model '%s': its engine thread did not stop; llama.cpp's memory is not freed", self.spec.name)
            return
        runtime, self.runtime = self.runtime, None
        if runtime is not None:
            runtime.close()
        gc.collect()
        log.info("model '%s' unloaded: llama.cpp context and weights freed", self.spec.name)
