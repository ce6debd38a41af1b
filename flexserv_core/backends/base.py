"""The typed objects plugins hand to the core: backends and the models they load.

Hooks are for discovery (``flexserv_register_backends`` returns :class:`Backend`
instances); these classes are for behaviour. The core calls ``Backend.load`` in a
worker thread, keeps the returned :class:`LoadedModel` in the model registry and
calls its request methods from the event loop. No hook is called per token.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import msgspec

from flexserv_core.errors import InvalidRequest, UnsupportedParameter
from flexserv_core.models.spec import ModelKind, ModelSpec

#: ``progress(message, fraction)``: a long step reports what it does and, when it
#: knows, how far it is (0.0-1.0). The core logs it and shows it on the console.
ProgressCallback = Callable[[str, float | None], None]

FinishReason = Literal["stop", "length"]

#: Names a request may not use as chat-template variables: chat-template
#: renderers (``apply_chat_template`` and the Jinja render it calls) take them as
#: arguments of their own, so a variable of that name would clash with what the
#: backend passes. Includes ``"messages"`` and ``"conversation"``.
RESERVED_TEMPLATE_KWARGS: frozenset[str] = frozenset(
    {
        "conversation",
        "messages",
        "tokenize",
        "add_generation_prompt",
        "continue_final_message",
        "return_dict",
        "return_tensors",
        "padding",
        "truncation",
        "max_length",
        "tokenizer_kwargs",
        "return_assistant_tokens_mask",
        "chat_template",
        "sanitize_control_tokens",
    }
)


class LoadedModel(abc.ABC):
    """A model resident in memory, owned by the registry until it is unloaded."""

    #: A :class:`ModelKind` or a plugin's own kind (any string).
    kind: ClassVar[str]

    def __init__(self, spec: ModelSpec, *, device: str = "cpu", dtype: str | None = None) -> None:
        self.spec = spec
        self.device = device
        self.dtype = dtype

    @abc.abstractmethod
    def unload(self) -> None:
        """Release weights, caches and threads. Called once, off the event loop,
        after the last request holding the model has finished."""

    @property
    def failure(self) -> str | None:
        """Why this model can no longer serve (its engine died), else ``None``.

        The registry replaces a failed model with a fresh load at the next request,
        and health reports it meanwhile. Read on the event loop: keep it cheap."""
        return None

    def stats(self) -> EngineStats | None:
        """Engine-level numbers for ``/metrics`` (``None``: the model has none).

        Called at every scrape, on the event loop: return a cheap snapshot."""
        return None


class EngineStats(msgspec.Struct, kw_only=True):
    """A snapshot of a model's engine, exported by ``/metrics`` under vLLM's names.

    Counters are cumulative since the model was loaded; leave what the engine does
    not track at its default (``None`` gauges are not exported).
    """

    #: Requests the engine accepted but has not started (its own queue).
    requests_waiting: int = 0
    #: Fraction (0.0-1.0) of the KV cache in use.
    kv_cache_usage: float | None = None
    #: Fraction (0.0-1.0) of the KV cache's budget whose memory is resident (written).
    kv_cache_resident: float | None = None
    #: Prompt tokens looked up in the prefix cache, and those found there.
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    #: Sequences preempted (their cache freed, recomputed later).
    preemptions: int = 0
    #: Speculative decoding: draft tokens verified, and those accepted.
    spec_decode_draft_tokens: int = 0
    spec_decode_accepted_tokens: int = 0
    #: A micro-batching model's batches run, and the items (inputs) they held: their
    #: ratio is the mean batch size (``None``: the model does not micro-batch).
    micro_batches: int | None = None
    micro_batch_items: int | None = None


class Placement(msgspec.Struct, kw_only=True, frozen=True):
    """Where a backend would put a model, told before it is loaded (health shows it)."""

    device: str | None = None
    dtype: str | None = None


class Backend(abc.ABC):
    """Loads models of one kind. Registered through ``flexserv_register_backends``."""

    #: Unique name, e.g. ``"transformers"``; a :class:`ModelSpec` may ask for it.
    name: ClassVar[str]
    #: The kind of model it loads: a :class:`ModelKind` or a new kind of the plugin's
    #: own (e.g. ``"rerank"``), which the catalog then accepts in configuration.
    kind: ClassVar[str]

    def accepts(self, spec: ModelSpec) -> bool:
        """Whether this backend recognises ``spec``'s source as one it loads.

        Asked only for specs of this backend's ``kind`` that name no backend (a spec
        naming this backend is always loaded by it, without asking). The default
        recognises nothing: such a backend loads only the models whose spec names it
        (``backend = "NAME"``), so installing it cannot take over other models.
        Override it to claim sources by their shape (a ``.gguf`` file, a directory
        holding a given file, a URL scheme); two backends recognising the same spec
        is an error naming both, unless one :meth:`preference` ranks it higher.
        """
        return False

    def preference(self, spec: ModelSpec) -> int:
        """How strongly this backend claims a ``spec`` it :meth:`accepts` (default 0).

        Asked only when several backends recognise an unnamed spec: the one with the
        highest preference loads it (a tie is an ``ambiguous_backend`` error). A
        backend specialised in a format (llama.cpp for GGUF) ranks it above a
        general one that can also read it."""
        return 0

    def placement(self, spec: ModelSpec) -> Placement | None:
        """The device and dtype a load of ``spec`` would use, from the settings alone.

        Called on the event loop (by health): cheap, never loads. ``None``: unknown."""
        return None

    @abc.abstractmethod
    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        """Load ``spec`` and return the resident model. Blocking; runs in a worker
        thread. Raise :class:`flexserv_core.errors.ModelLoadError` with a message a
        user can act on."""


# --- text generation ---------------------------------------------------------------


ConstraintKind = Literal["json_object", "json_schema", "regex", "choice", "grammar"]


class Constraint(msgspec.Struct, frozen=True, kw_only=True):
    """What a completion must match, described without naming a grammar library.

    The API layer checks the shape (``kind``, that ``spec`` is there); the
    platform's compiler (``flexserv_constraint_compiler``) compiles it for the
    model's vocabulary and raises :class:`~flexserv_core.errors.InvalidRequest` with
    ``param`` when it cannot; the backend may refuse it too (see
    :meth:`TextGenerationModel.prepare`).

    ``spec`` by ``kind``: ``json_object`` none (any JSON object); ``json_schema``
    the schema as JSON text; ``regex`` the pattern (matched in full); ``choice`` a
    JSON array of the allowed strings; ``grammar`` a Lark grammar (rule ``start``).

    ``prefix``/``suffix``: literal text around the constrained value (tool-call tags);
    with ``repeat``, ``prefix value suffix`` occurs one or more times, joined by
    ``separator`` (parallel tool calls). Frozen, so a backend may cache by it.
    """

    kind: ConstraintKind
    spec: str = ""
    prefix: str = ""
    suffix: str = ""
    repeat: bool = False
    separator: str = ""
    #: The request parameter an error about this constraint names.
    param: str = "response_format"


class SamplingParams(msgspec.Struct, kw_only=True):
    """Per-request decoding settings, already validated by the API layer.

    ``logit_bias``: token id -> value added to its logit before sampling (OpenAI's
    -100..100). ``constraint``: the output must match it (EOS only where it is complete).

    ``min_p``, ``repetition_penalty``, ``min_tokens`` and ``ignore_eos`` are vLLM's
    extensions (see :data:`SAMPLING_EXTENSIONS`); at their defaults they are off. A
    backend that implements them says so in
    :attr:`TextGenerationModel.sampling_extensions`; requests using one it does not
    list are refused with a 400 naming the parameter before ``generate`` is called.
    """

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: bool = False
    top_logprobs: int = 0
    logit_bias: dict[int, float] | None = None
    #: Keep only tokens whose probability is at least ``min_p`` times the most
    #: likely token's, after temperature and before top-k/top-p (``0``: off).
    min_p: float = 0.0
    #: For every token already in the prompt or the output: a positive logit is
    #: divided by it, a negative one multiplied (``1``: off), before the other penalties.
    repetition_penalty: float = 1.0
    #: The end-of-sequence tokens are not sampled before this many tokens are
    #: generated (unless a constraint allows nothing else); the API layer also holds
    #: stop strings back until then.
    min_tokens: int = 0
    #: The end-of-sequence tokens are never sampled (unless a constraint allows
    #: nothing else): the sequence runs to ``max_tokens``.
    ignore_eos: bool = False
    constraint: Constraint | None = None
    #: ``constraint`` compiled for the model's :attr:`~TextGenerationModel.constraint_vocabulary`
    #: (set by the platform before ``generate`` is called): each sequence takes its
    #: own ``grammar.matcher()`` and honours it at every step. A
    #: ``flexserv_constraints.CompiledConstraint``, which the core only passes through.
    grammar: Any = None
    #: Seconds the sequence may wait in the backend's queue before its first
    #: forward pass (``None``: forever). A backend that queues fails it with
    #: ``ServiceUnavailable(code="queue_timeout")`` after that and frees its place.
    queue_timeout: float | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def suppresses_eos(self) -> bool:
        """Whether end-of-sequence tokens are masked at some step (``min_tokens``/``ignore_eos``)."""
        return self.ignore_eos or self.min_tokens > 0

    def extensions_used(self) -> list[str]:
        """The :data:`SAMPLING_EXTENSIONS` these params set to other than their off value."""
        return [name for name in SAMPLING_EXTENSIONS if getattr(self, name) != _EXTENSION_OFF[name]]


#: :class:`SamplingParams` fields (vLLM's sampling extensions) a backend must list in
#: :attr:`TextGenerationModel.sampling_extensions` to be given: a request setting one
#: that the model's backend does not list is a 400 naming it, never silently ignored.
SAMPLING_EXTENSIONS: tuple[str, ...] = ("min_p", "repetition_penalty", "min_tokens", "ignore_eos")
_EXTENSION_OFF: dict[str, object] = {"min_p": 0.0, "repetition_penalty": 1.0, "min_tokens": 0, "ignore_eos": False}


class TopLogprob(msgspec.Struct):
    token_id: int
    token: str
    logprob: float


class TokenDelta(msgspec.Struct, kw_only=True):
    """One generated token as the backend streams it.

    ``text`` is the newly decodable text (may be empty while a multi-byte
    character is incomplete). ``finish_reason`` is set on the last delta: ``"stop"``
    for an end-of-sequence token (whose ``text`` is empty), ``"length"`` when
    ``max_tokens`` or the context is exhausted. Stop *strings* are the core's job.
    """

    token_id: int
    text: str
    logprob: float | None = None
    top_logprobs: list[TopLogprob] | None = None
    finish_reason: FinishReason | None = None


class TextLimits(msgspec.Struct, frozen=True, kw_only=True):
    """What a text model accepts, declared once and enforced by the API layer.

    Every request is checked against these before the model sees it; a request
    outside them gets an OpenAI-shaped 400 naming the offending parameter. The model
    and its engine may therefore *assume* them (and only ``assert``).

    Attributes:
        context_length: most tokens one sequence may hold, prompt and completion
            together. A prompt needs at least one token of room left.
        vocab_size: number of token ids the model knows; prompt token ids must lie in
            ``[0, vocab_size)``. ``None``: only non-negative ids are required.
        default_max_tokens: completion budget of a request that sets no
            ``max_tokens`` (capped by what is left of the context). ``None``: all that
            is left.
        max_max_tokens: the largest ``max_tokens`` (or ``max_completion_tokens``) a
            request may ask for. ``None``: only the context bounds it.
        max_images: most images one chat request may carry. ``0`` (the default): the
            model takes text only, and a request with an image part gets a 400 naming
            the model. Above 0, :meth:`TextGenerationModel.render_chat` receives image
            parts (see there).
        max_token_bytes: the most UTF-8 bytes of prompt text one token can stand for
            (the longest token's text, with the tokenizer changing no text into
            fewer bytes before it matches tokens). A text prompt of more than
            ``(context_length - 1) * max_token_bytes`` bytes (not counting
            ``dropped_bytes``) is refused as too long for the context without being
            tokenized. ``None``: not known; every prompt is tokenized before its
            length is checked.
        dropped_bytes: the byte values the tokenizer drops from UTF-8 text (a
            byte-level vocabulary without a token for them): they take no token, so
            the bound above does not count them.
    """

    context_length: int
    vocab_size: int | None = None
    default_max_tokens: int | None = None
    max_max_tokens: int | None = None
    max_images: int = 0
    max_token_bytes: int | None = None
    dropped_bytes: bytes = b""

    def __post_init__(self) -> None:
        for name in ("context_length", "vocab_size", "default_max_tokens", "max_max_tokens", "max_token_bytes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"TextLimits.{name} must be at least 1, not {value}")
        if self.max_images < 0:
            raise ValueError(f"TextLimits.max_images must be at least 0, not {self.max_images}")


@dataclass(frozen=True, slots=True, eq=False)
class ImageInput:
    """One image of a chat request, fetched and decoded by the API layer.

    Attributes:
        image: the decoded picture, a ``PIL.Image.Image`` in RGB (its size checked
            against the server's pixel bound; the model's processor resizes it).
        digest: sha256 (hex) of the image's encoded bytes: what a prefix cache keys
            on, so an identical image hits and a different one with the same text does not.
    """

    image: Any
    digest: str

    @property
    def width(self) -> int:
        return int(self.image.width)

    @property
    def height(self) -> int:
        return int(self.image.height)


class TextGenerationModel(LoadedModel):
    """A causal language model with its tokenizer.

    Its request methods get only what :attr:`limits` allows: ``generate`` is called
    with ``1 <= len(prompt_ids)`` and ``len(prompt_ids) + params.max_tokens <=
    limits.context_length``, and token-id prompts within ``limits.vocab_size``.
    """

    kind = ModelKind.TEXT

    #: Set by the subclass (usually in ``__init__``) before the model is returned by
    #: :meth:`Backend.load`.
    limits: TextLimits
    #: The chat template's source, when the backend has one: the API reads it to
    #: tell whether the template renders ``tools`` (passed in ``template_kwargs``)
    #: and which tool-call syntax the model writes.
    chat_template: str | None = None
    #: The model's vocabulary for the platform's constrained decoding (a
    #: ``flexserv_constraints.ConstraintVocabulary``, which the core passes to the
    #: compiler unread). Set it, and honour ``params.grammar`` in :meth:`generate`, to
    #: serve ``response_format``, ``structured_outputs`` and required tool calls;
    #: ``None`` (the default): such requests get a 400 naming the parameter before
    #: anything is generated.
    constraint_vocabulary: object | None = None
    #: The :data:`SAMPLING_EXTENSIONS` (``min_p``, ``repetition_penalty``,
    #: ``min_tokens``, ``ignore_eos``) whose :class:`SamplingParams` fields
    #: :meth:`generate` honours. A request that sets another one gets a 400 naming it
    #: before anything is generated; the default is none.
    sampling_extensions: frozenset[str] = frozenset()

    @abc.abstractmethod
    def render_chat(self, messages: list[dict[str, Any]], template_kwargs: dict[str, Any]) -> list[int]:
        """Apply the chat template (with ``template_kwargs`` for this request only)
        and return prompt token ids ending with the generation prompt.

        A message's ``content`` is a string, except in requests with images (only
        for models whose ``limits.max_images`` is above 0): there, each message that
        has an image carries a list of ``{"type": "text", "text": ...}`` and
        ``{"type": "image", "image": ImageInput}`` parts, in the request's order.
        The API hands the returned object, unchanged, to :meth:`generate` as
        ``prompt_ids``, so a backend may return a ``list[int]`` subclass that also
        carries the prompt's processed images.
        """

    def render_chat_for_generation(self, messages: list[dict[str, Any]], template_kwargs: dict[str, Any]) -> list[int]:
        """:meth:`render_chat` for a prompt that is to be generated from (``/tokenize``
        only counts, with :meth:`render_chat`). A backend that declares
        ``limits.max_token_bytes`` checks the rendered text with
        ``flexserv_core.check_prompt_text(limits, text, "messages")`` before
        tokenizing it, so an over-long prompt costs no tokenizing; the default renders."""
        return self.render_chat(messages, template_kwargs)

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]:
        """Tokenize a raw completion prompt (with the model's BOS handling)."""

    @abc.abstractmethod
    def decode(self, token_ids: list[int]) -> str:
        """Detokenize, skipping special tokens."""

    async def prepare(self, params: SamplingParams) -> None:
        """Check, before any output is sent, what ``generate`` will need for ``params``.

        Called once per request by the text session, after the constraint (if any)
        was compiled into ``params.grammar`` and before the deadlines start. Raise
        :class:`InvalidRequest` (with ``param``) for what this backend cannot do. The
        default refuses ``logit_bias``, so a backend that does not override this never
        drops it silently.
        """
        if params.logit_bias:
            raise UnsupportedParameter(f"The model '{self.spec.name}' does not support logit_bias.", param="logit_bias")

    def tokenize(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Tokenize ``text`` for ``POST /tokenize``: with the model's special tokens
        (BOS...) as :meth:`encode` adds them, or without. Override to support
        ``add_special_tokens=False``; the default answers it with a 400."""
        if add_special_tokens:
            return self.encode(text)
        raise InvalidRequest(
            f"The model '{self.spec.name}' cannot tokenize without its special tokens.", param="add_special_tokens"
        )

    def token_text(self, token_id: int) -> str:
        """One token as text, special tokens included where the backend can (``/tokenize``'s
        ``token_strs``). The default decodes the token alone."""
        return self.decode([token_id])

    @abc.abstractmethod
    def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[TokenDelta]:
        """Stream the completion of ``prompt_ids``.

        Returns an async iterator; the consumer closing it early (``aclose()``,
        client disconnect, stop string) must cancel the sequence within one decode
        step and free its resources.
        """
