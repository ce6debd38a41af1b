"""One request's state inside the engine."""

from __future__ import annotations

import itertools
import time

from flexserv_batching import TokenChannel
from flexserv_constraints import TokenMatcher

from flexserv_core import SamplingParams
from flexserv_transformers.engine.blocks import BlockKey
from flexserv_transformers.engine.speculative import DraftState
from flexserv_transformers.engine_api import EngineToken
from flexserv_transformers.media import PromptMedia
from flexserv_transformers.sampling import SamplerState

_ids = itertools.count()

#: What flows to a request's coroutine: a token, or the error that ends its stream.
Outcome = EngineToken | BaseException


class Sequence:
    """Tokens, KV blocks and output channel of one request.

    The engine thread owns every field except ``cancelled``, which the event loop
    sets (a plain bool write; the engine reads it at the start of each step).
    """

    def __init__(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        *,
        max_total_tokens: int,
        channel: TokenChannel,
        vocab_size: int,
        device: str = "cpu",
        grammar: TokenMatcher | None = None,
        media: PromptMedia | None = None,
        eos_token_ids: frozenset[int] = frozenset(),
        max_draft: int = 0,
    ) -> None:
        """``max_draft``: the most tokens it drafts per step (0: it never speculates;
        see :mod:`.speculative`)."""
        self.id = next(_ids)
        self.prompt_len = len(prompt_ids)
        self.tokens = list(prompt_ids)
        self.params = params
        self.max_total_tokens = max_total_tokens
        self.sampler = SamplerState(
            params,
            vocab_size=vocab_size,
            device=device,
            grammar=grammar,
            prompt_ids=prompt_ids,
            eos_token_ids=eos_token_ids,
        )
        self.channel = channel
        self.blocks: list[int] = []  # block table: position p is in blocks[p // block_size]
        self.num_computed = 0  # tokens whose K/V sit in ``blocks``
        #: Leading table entries released because they fell out of every layer's window
        #: (windowed models only): ``blocks[:num_released]`` are holes (``blocks.HOLE``).
        self.num_released = 0
        self.block_keys: list[BlockKey] = []  # keys of full blocks (grows as tokens do)
        self.num_registered = 0  # leading full blocks registered with the prefix cache
        #: (blocks queried, blocks hit) of its admission's prefix lookup, until its first
        #: step counts it in the cache's statistics (dropped if it is preempted before).
        self.prefix_lookup: tuple[int, int] | None = None
        self.cancelled = False
        self.finished = False
        self.preemptions = 0
        self.submitted_at = time.monotonic()
        #: The prompt's images (vision-language models), else ``None``.
        self.media = media
        #: Speculative tokens to verify in the coming step, after ``tokens`` (set by
        #: the engine before it schedules; the scheduler may shorten or drop it).
        self.draft: list[int] = []
        self.drafting: DraftState | None = DraftState(max_draft) if max_draft > 0 else None

    def key_content(self, start: int, stop: int) -> tuple[int | str, ...]:
        """What the prefix cache keys positions ``start..stop-1`` on: the token ids,
        with each image token replaced by its image's digest (see :mod:`...media`)."""
        media = self.media
        if media is None or start >= media.end:
            return tuple(self.tokens[start:stop])
        marks = media.marks
        return tuple(marks.get(p, self.tokens[p]) for p in range(start, stop))

    def queue_expired(self, now: float) -> bool:
        """Still waiting for its first step past ``params.queue_timeout``."""
        limit = self.params.queue_timeout
        return (
            limit is not None and self.num_generated == 0 and self.preemptions == 0 and now - self.submitted_at >= limit
        )

    @property
    def num_generated(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def remaining(self) -> int:
        """Tokens it may still generate (``max_tokens`` or the context, whichever ends first)."""
        return min(self.params.max_tokens - self.num_generated, self.max_total_tokens - len(self.tokens))

    @property
    def pending(self) -> int:
        """Tokens still to run through the model before the next sample."""
        return len(self.tokens) - self.num_computed

    def emit(self, item: Outcome) -> None:
        """Hand ``item`` to the request's coroutine (called from the engine thread)."""
        if not self.channel.put(item):  # the request's loop is closed: nobody is listening
            self.cancelled = True
