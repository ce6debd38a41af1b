"""Test doubles shipped as public API: a deterministic text backend and its plugin.

They are real plugins (hookimpls on plain objects), so tests exercise the same
hook calls as production plugins do.

In short (``docs/plugins.md`` has the full table):

* ``FakeBackendPlugin()`` registers the backend ``"fake"`` and offers the text model
  ``"fake-model"`` (source ``"fake://"``; ``FakeBackendPlugin("other")`` renames it).
  It also loads any configured text model whose source starts with ``fake://``.
* The model is one character per token (token id = code point). A chat prompt
  renders as ``role: content`` lines, then ``key=value`` lines for the template
  variables, then ``assistant: ``. The completion is :data:`FAKE_SCRIPT` repeated
  up to ``max_tokens``.
* What the model received: ``fake.last_prompt`` (the prompt text of the latest
  generation) and ``fake.requests`` (every :class:`FakeRequest`: prompt text, token
  ids, sampling params), on the plugin, the backend or one model.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import msgspec

from flexserv_core.backends.base import (
    Backend,
    LoadedModel,
    ProgressCallback,
    SamplingParams,
    TextGenerationModel,
    TextLimits,
    TokenDelta,
    TopLogprob,
)
from flexserv_core.hookspecs import hookimpl
from flexserv_core.models.spec import ModelKind, ModelSpec

FAKE_SCRIPT = "The quick brown fox jumps over the lazy dog. "
#: Alternatives the fake offers in ``top_logprobs`` after the sampled character.
FAKE_ALTERNATIVES = "abcdefghijklmnopqrstuvwxyz"


class FakeRequest(msgspec.Struct, frozen=True):
    """One generation as the fake model received it."""

    prompt: str
    prompt_ids: list[int]
    params: SamplingParams


class FakeTextModel(TextGenerationModel):
    """One character per token. Chat prompts render as ``role: content`` lines;
    the completion is ``script`` (default :data:`FAKE_SCRIPT`) repeated, up to
    ``max_tokens``; with ``eos_after=k`` it ends after ``k`` tokens with an
    end-of-sequence delta (empty text, ``finish_reason="stop"``); with
    ``fail_after=k`` it raises ``RuntimeError`` after ``k`` tokens (a backend bug).

    It honours ``min_tokens`` and ``ignore_eos`` (no end of sequence before or at
    all), and lists them in :attr:`sampling_extensions`; ``sampling_extensions=``
    makes it list others (which it records in ``params_log`` and otherwise ignores).

    With ``params.logprobs`` each token has logprob -0.5 and, for
    ``params.top_logprobs=k``, ``k`` alternatives: the sampled character, then
    letters of :data:`FAKE_ALTERNATIVES` at -1.0, -2.0, ... Every generation is
    recorded in ``requests`` (``last_prompt`` is the latest prompt's text) and its
    params in ``params_log``; ``tokens_emitted`` counts deltas over all sequences.
    """

    def __init__(
        self,
        spec: ModelSpec,
        *,
        token_delay: float = 0.0,
        context_length: int = 4096,
        max_max_tokens: int | None = None,
        default_max_tokens: int | None = None,
        max_images: int = 0,
        script: str = FAKE_SCRIPT,
        eos_after: int | None = None,
        fail_after: int | None = None,
        sampling_extensions: Iterable[str] = ("min_tokens", "ignore_eos"),
    ) -> None:
        super().__init__(spec, device="cpu", dtype="none")
        self.sampling_extensions = frozenset(sampling_extensions)
        self.limits = TextLimits(
            context_length=context_length,
            vocab_size=0x110000,  # token ids are code points
            default_max_tokens=default_max_tokens,
            max_max_tokens=max_max_tokens,
            max_images=max_images,
        )
        self.token_delay = token_delay
        self.script = script
        self.eos_after = eos_after
        self.fail_after = fail_after
        self.unloaded = False
        self.generated_sequences = 0
        self.cancelled_sequences = 0
        self.tokens_emitted = 0
        self.params_log: list[SamplingParams] = []
        self.requests: list[FakeRequest] = []

    @property
    def last_prompt(self) -> str | None:
        """The prompt text of the latest generation (``None`` before the first)."""
        return self.requests[-1].prompt if self.requests else None

    def render_chat(self, messages: list[dict[str, Any]], template_kwargs: dict[str, Any]) -> list[int]:
        """``role: content`` lines (an image part as ``<image WxH>``), the template variables, ``assistant: ``."""
        lines = [f"{m.get('role')}: {_flat(m.get('content'))}" for m in messages]
        lines += [f"{k}={v}" for k, v in sorted(template_kwargs.items())]
        return self.encode("\n".join(lines) + "\nassistant: ")

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, token_ids: list[int]) -> str:
        return "".join(chr(t) for t in token_ids)

    def tokenize(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return self.encode(text)  # the fake has no special tokens

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[TokenDelta]:
        assert prompt_ids and len(prompt_ids) + params.max_tokens <= self.limits.context_length
        self.generated_sequences += 1
        self.params_log.append(params)
        self.requests.append(FakeRequest(prompt=self.decode(prompt_ids), prompt_ids=list(prompt_ids), params=params))
        finished = False
        try:
            for i in range(params.max_tokens):
                if self.token_delay:
                    await asyncio.sleep(self.token_delay)
                if self.fail_after is not None and i == self.fail_after:
                    raise RuntimeError(f"fake backend failure after {i} tokens")
                if self.eos_after is not None and i >= max(self.eos_after, params.min_tokens) and not params.ignore_eos:
                    self.tokens_emitted += 1
                    yield TokenDelta(token_id=0, text="", finish_reason="stop")
                    break
                char = self.script[i % len(self.script)]
                last = i == params.max_tokens - 1
                self.tokens_emitted += 1
                yield TokenDelta(
                    token_id=ord(char),
                    text=char,
                    logprob=-0.5 if params.logprobs else None,
                    top_logprobs=self._alternatives(char, params.top_logprobs) if params.logprobs else None,
                    finish_reason="length" if last else None,
                )
            finished = True
        finally:
            if not finished:
                self.cancelled_sequences += 1

    @staticmethod
    def _alternatives(char: str, k: int) -> list[TopLogprob]:
        alternatives = [TopLogprob(token_id=ord(char), token=char, logprob=-0.5)]
        alternatives += [
            TopLogprob(token_id=ord(c), token=c, logprob=-1.0 - j) for j, c in enumerate(FAKE_ALTERNATIVES)
        ]
        return alternatives[:k]

    def unload(self) -> None:
        self.unloaded = True


def _flat(content: Any) -> Any:
    """A message's content parts as one string, images as ``<image WxH>``."""
    if not isinstance(content, list):
        return content
    return "".join(
        p["text"] if p["type"] == "text" else f"<image {p['image'].width}x{p['image'].height}>" for p in content
    )


class FakeTextBackend(Backend):
    """Loads :class:`FakeTextModel`: models whose spec names ``"fake"`` and any
    text model with a ``fake://`` source. ``loads`` counts loads, ``models`` keeps
    every model it made; ``fail="message"`` makes every load raise."""

    name = "fake"
    kind = ModelKind.TEXT

    def __init__(
        self, *, load_delay: float = 0.0, token_delay: float = 0.0, fail: str | None = None, **model_options: Any
    ) -> None:
        """``model_options`` go to each :class:`FakeTextModel` (``script``, ``eos_after``, ``fail_after``,
        ``sampling_extensions``, and the limits ``context_length``, ``max_max_tokens``, ``default_max_tokens``,
        ``max_images``)."""
        self.load_delay = load_delay
        self.token_delay = token_delay
        self.fail = fail
        self.model_options = model_options
        self.loads = 0
        self.models: list[FakeTextModel] = []
        self._lock = threading.Lock()

    def accepts(self, spec: ModelSpec) -> bool:
        return spec.source.startswith("fake://")

    @property
    def requests(self) -> list[FakeRequest]:
        """Every generation of every model this backend loaded, model by model."""
        return [r for model in list(self.models) for r in model.requests]

    @property
    def last_prompt(self) -> str | None:
        """The prompt text of the latest generation of the latest model loaded."""
        prompts = [m.last_prompt for m in list(self.models) if m.last_prompt is not None]
        return prompts[-1] if prompts else None

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        with self._lock:
            self.loads += 1
        progress("loading fake weights", 0.0)
        time.sleep(self.load_delay)
        if self.fail:
            raise RuntimeError(self.fail)
        model = FakeTextModel(spec, token_delay=self.token_delay, **self.model_options)
        self.models.append(model)
        progress("loading fake weights", 1.0)
        return model


class FakeBackendPlugin:
    """Registers :class:`FakeTextBackend` and offers ``fake-model`` (or ``model_name``).

    ``backend_options`` go to :class:`FakeTextBackend` (``load_delay``,
    ``token_delay``, ``fail``) and on to each model (``script``, ``eos_after``,
    ``fail_after``, ``context_length``). Being a third-party plugin, its model is
    the default text model only when no first-party plugin offers one.
    """

    def __init__(self, model_name: str = "fake-model", *, backend_name: str = "fake", **backend_options: Any) -> None:
        """``backend_name`` renames this instance's backend: several fake plugins in
        one app need distinct names (two backends with one name stop start-up)."""
        cls = FakeTextBackend
        if backend_name != cls.name:  # ``name`` is a class attribute: a subclass carries the new one

            class NamedFakeTextBackend(FakeTextBackend):
                pass

            NamedFakeTextBackend.name = backend_name
            cls = NamedFakeTextBackend
        self.backend = cls(**backend_options)
        self.model_name = model_name

    @property
    def requests(self) -> list[FakeRequest]:
        return self.backend.requests

    @property
    def last_prompt(self) -> str | None:
        return self.backend.last_prompt

    @hookimpl
    def flexserv_register_backends(self, settings: Any) -> list[Backend]:
        return [self.backend]

    @hookimpl
    def flexserv_default_models(self, settings: Any) -> list[ModelSpec]:
        return [
            ModelSpec(
                name=self.model_name,
                kind=ModelKind.TEXT,
                source="fake://",
                backend=self.backend.name,
                origin="embedded",
            )
        ]
