"""The loaded transformers text model: tokenizer side here, forward passes in an engine."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from flexserv_chat_templates import LiteralSpecials
from flexserv_constraints import CompiledConstraint

from flexserv_core import (
    SAMPLING_EXTENSIONS,
    EngineStats,
    InvalidRequest,
    SamplingParams,
    TextGenerationModel,
    TextLimits,
    TokenDelta,
    TopLogprob,
    check_prompt_text,
    reserved_template_names,
)
from flexserv_transformers.detokenize import IncrementalDetokenizer
from flexserv_transformers.engine_api import Engine, EngineModel, load_engine_factory
from flexserv_transformers.grammar import constraint_vocabulary
from flexserv_transformers.loading import (
    context_length,
    embedding_rows,
    eos_token_ids,
    image_token_id,
    parameter_dtype,
)
from flexserv_transformers.media import ImagePrompt, PromptMedia
from flexserv_transformers.text_tokenizer import decode_text, special_token_texts
from flexserv_transformers.token_bound import token_bound

if TYPE_CHECKING:
    from transformers import ProcessorMixin

    from flexserv_core import ImageInput, ModelSpec, Settings
    from flexserv_transformers.loading import CausalLM
    from flexserv_transformers.text_tokenizer import TextTokenizer

log = logging.getLogger(__name__)

#: Processor outputs that describe the text, not the images.
_TEXT_INPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids"})


class TransformersTextModel(TextGenerationModel):
    """A causal LM with its tokenizer, generating through an :class:`Engine`.

    Attributes:
        engine: the engine running the forward passes (see ``engine_api``).
        eos_token_ids: ids that end a completion with ``finish_reason="stop"``.
        limits: the context is the smaller of the model's and what the engine can
            hold for one sequence (its KV cache); prompt ids must be below the rows
            of the input embedding.
    """

    #: all of them, in :mod:`flexserv_transformers.sampling` (both engines sample there)
    sampling_extensions = frozenset(SAMPLING_EXTENSIONS)

    def __init__(
        self,
        spec: ModelSpec,
        model: CausalLM,
        tokenizer: TextTokenizer,
        *,
        settings: Settings,
        engine: str,
        default_max_tokens: int,
        processor: ProcessorMixin | None = None,
        max_images: int = 8,
    ) -> None:
        dtype = parameter_dtype(model)
        super().__init__(spec, device=str(model.device), dtype=str(dtype).removeprefix("torch."))
        self.tokenizer = tokenizer
        #: A vision-language model's processor (sizes images, expands their tokens); ``None``: text only.
        self.processor = processor
        self.image_token_id = image_token_id(model, processor) if processor is not None else None
        self.eos_token_ids = eos_token_ids(model, tokenizer)
        self.engine_name = engine
        template = getattr(processor, "chat_template", None) or tokenizer.chat_template
        self.chat_template = template if isinstance(template, str) else None
        self._token_texts: dict[int, str] = {}
        # a client's text that spells a special token stays text (flexserv_chat_templates.literal)
        self._literals = LiteralSpecials(special_token_texts(tokenizer))
        engine_model = EngineModel(
            model=model,
            device=model.device,
            eos_token_ids=self.eos_token_ids,
            context_length=context_length(model),
            vocab_size=int(model.get_output_embeddings().out_features),
            name=spec.name,
        )
        #: What the engine runs (the HF model, EOS ids): public for tools and tests.
        self.engine_model = engine_model
        self.engine: Engine = load_engine_factory(engine)(engine_model, settings)
        bound = token_bound(tokenizer)
        self.limits = TextLimits(
            context_length=self.engine.max_sequence_tokens,
            vocab_size=embedding_rows(model.get_input_embeddings()),
            default_max_tokens=default_max_tokens,
            max_images=max_images if processor is not None else 0,
            max_token_bytes=bound.max_token_bytes,
            dropped_bytes=bound.dropped_bytes,
        )
        self.constraint_vocabulary = constraint_vocabulary(tokenizer, engine_model.vocab_size, self.eos_token_ids)
        self._model: CausalLM | None = model

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
        (messages, template_kwargs), found = self._literals.protect((messages, template_kwargs))
        if self.processor is not None:
            return self._render_with_images(messages, template_kwargs, found, bounded=bounded)
        try:
            text = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False, **template_kwargs
            )
        except Exception as exc:  # jinja errors, raise_exception() in templates, bad message shapes
            raise self._rejected(exc) from exc
        assert isinstance(text, str)
        if bounded:
            self._check_rendered(text, found)
        if found:  # tokenized around the client's special-token texts
            return LiteralSpecials.tokenize(text, found, self._tokenize_text)
        try:
            return self._tokenize_text(text)
        except Exception as exc:  # as when the template call tokenized (text the tokenizer cannot take)
            raise self._rejected(exc) from exc

    def _rejected(self, exc: Exception) -> InvalidRequest:
        return InvalidRequest(f"The chat template of '{self.spec.name}' rejected the messages: {exc}", param="messages")

    def _check_rendered(self, text: str, found: list[str]) -> None:
        """The rendered prompt within the context bound, measured as it is tokenized."""
        check_prompt_text(self.limits, LiteralSpecials.restored(text, found) if found else text, "messages")

    def _tokenize_text(self, text: str) -> list[int]:
        """A rendered prompt (or a piece of one) as ids: special tokens recognised, none added."""
        return [int(i) for i in self.tokenizer(text, add_special_tokens=False)["input_ids"]]

    def _render_with_images(
        self, messages: list[dict[str, Any]], template_kwargs: dict[str, Any], found: list[str], *, bounded: bool
    ) -> list[int]:
        """A vision-language model's prompt: every message's content as parts (what
        its template expects), images as ``{"type": "image"}`` placeholders; the
        processor then expands each placeholder into the image's tokens and sizes
        the pixels. Returns an :class:`ImagePrompt` when there are images. ``found``:
        the client's special-token texts held aside (:class:`LiteralSpecials`);
        ``bounded`` as in :meth:`_render`, for a prompt without images (the processor
        tokenizes one with images its own way)."""
        assert self.processor is not None and self.image_token_id is not None
        images: list[ImageInput] = []
        rendered: list[dict[str, Any]] = []
        for message in messages:
            content = message.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            elif isinstance(content, list):
                parts = []
                for part in content:
                    if part.get("type") == "image":
                        images.append(part["image"])
                        parts.append({"type": "image"})
                    else:
                        parts.append(part)
                content = parts
            rendered.append({**message, "content": content})
        try:
            text = self.tokenizer.apply_chat_template(
                rendered,
                chat_template=self.chat_template,
                add_generation_prompt=True,
                tokenize=False,
                **template_kwargs,
            )
        except Exception as exc:
            raise self._rejected(exc) from exc
        assert isinstance(text, str)
        if not images:
            if bounded:
                self._check_rendered(text, found)
            return LiteralSpecials.tokenize(text, found, self._tokenize_text)
        if found:  # the processor expands image tokens in the whole text: held texts go back defused
            text = LiteralSpecials.defused(text, found)
        out = self.processor(
            text=[text], images=[image.image for image in images], return_tensors="pt", add_special_tokens=False
        )
        ids = [int(i) for i in out["input_ids"][0]]
        pixels = {k: v for k, v in out.items() if k not in _TEXT_INPUTS and hasattr(v, "is_floating_point")}
        media = PromptMedia(pixels, [image.digest for image in images], ids, self.image_token_id)
        if not media.positions:
            raise InvalidRequest(
                f"The chat template of '{self.spec.name}' does not place the images in the prompt.", param="messages"
            )
        return ImagePrompt(ids, media)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def decode(self, token_ids: list[int]) -> str:
        return decode_text(self.tokenizer, token_ids, skip_special_tokens=True)

    def tokenize(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])

    def token_text(self, token_id: int) -> str:
        """One token as text (special tokens included), for ``top_logprobs``."""
        text = self._token_texts.get(token_id)
        if text is None:
            text = self._token_texts[token_id] = decode_text(self.tokenizer, [token_id], skip_special_tokens=False)
        return text

    # -- generation -----------------------------------------------------------------

    async def prepare(self, params: SamplingParams) -> None:
        if params.logit_bias:
            bad = [t for t in params.logit_bias if not 0 <= t < self.engine_model.vocab_size]
            if bad:
                raise InvalidRequest(
                    f"logit_bias has token id {bad[0]}, outside this model's vocabulary [0, {self.engine_model.vocab_size}).",
                    param="logit_bias",
                )

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[TokenDelta]:
        # The API layer checked the request against ``limits`` (text_validation).
        assert prompt_ids and len(prompt_ids) + params.max_tokens <= self.limits.context_length
        assert params.constraint is None or params.grammar is not None, "prepare_params() compiles the constraint"
        compiled: CompiledConstraint | None = params.grammar  # the core passes it through untyped
        grammar = compiled.matcher() if compiled is not None else None
        detokenizer = IncrementalDetokenizer(self.tokenizer, prompt_ids)
        media = prompt_ids.media if isinstance(prompt_ids, ImagePrompt) else None
        async with aclosing(self.engine.generate(prompt_ids, params, grammar, media=media)) as tokens:
            async for token in tokens:
                if token.finish_reason == "stop":
                    text = detokenizer.flush()
                else:
                    text = detokenizer.add(token.token_id)
                    if token.finish_reason is not None:
                        text += detokenizer.flush()
                top = None
                if token.top_logprobs is not None:
                    top = [TopLogprob(token_id=i, token=self.token_text(i), logprob=lp) for i, lp in token.top_logprobs]
                yield TokenDelta(
                    token_id=token.token_id,
                    text=text,
                    logprob=token.logprob,
                    top_logprobs=top,
                    finish_reason=token.finish_reason,
                )

    # -- lifecycle ------------------------------------------------------------------

    @property
    def failure(self) -> str | None:
        """The engine's, when it stopped by itself (see ``PagedEngine.failure``)."""
        failure = getattr(self.engine, "failure", None)
        return failure if isinstance(failure, str) else None

    def stats(self) -> EngineStats:
        """The engine's numbers under the core's names (the simple engine has no KV
        blocks or prefix cache: only its queue is reported)."""
        raw = self.engine.stats()
        stats = EngineStats(requests_waiting=int(raw.get("waiting_sequences", 0)))
        kv, prefix = raw.get("kv_cache"), raw.get("prefix_cache")
        if isinstance(kv, dict) and kv.get("total_blocks"):
            stats.kv_cache_usage = kv["used_blocks"] / kv["total_blocks"]
            stats.kv_cache_resident = kv["touched_blocks"] / kv["total_blocks"]
            if isinstance(prefix, dict):
                # vLLM counts tokens; the block manager counts whole blocks.
                stats.prefix_cache_queries = int(prefix["queried_blocks"]) * int(kv["block_size"])
                stats.prefix_cache_hits = int(prefix["hit_blocks"]) * int(kv["block_size"])
        stats.preemptions = int(raw.get("preemptions", 0))
        spec = raw.get("speculative")
        if isinstance(spec, dict):
            stats.spec_decode_draft_tokens = int(spec["drafted_tokens"])
            stats.spec_decode_accepted_tokens = int(spec["accepted_tokens"])
        return stats

    def unload(self) -> None:
        self.engine.close()
        self._model = None
        self._token_texts.clear()
