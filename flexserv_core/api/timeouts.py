"""A generation's three time limits: queue, first token, total.

The clock starts when the request holds its loaded model (a model's load is
bounded by its backend's own load timeout, not by these). ``queue_timeout`` is
handed to the backend in :class:`SamplingParams` (only a backend knows when a
sequence leaves its queue); the other two are enforced here, around each wait
for the model's next token, so an expiry cancels that wait, which closes the
model's token iterator and frees the sequence in the backend.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from flexserv_core.errors import GatewayTimeout
from flexserv_core.settings import CoreSettings

if TYPE_CHECKING:
    from flexserv_core.api.text_generation import ChoiceJob


@dataclass(slots=True, frozen=True)
class Deadlines:
    """Absolute ``time.monotonic()`` deadlines of one request (``None``: none)."""

    first_token: float | None
    total: float | None
    first_token_seconds: float = 0.0
    total_seconds: float = 0.0

    @classmethod
    def start(cls, core: CoreSettings, now: float | None = None) -> Deadlines:
        now = time.monotonic() if now is None else now
        first, total = core.first_token_timeout, core.request_timeout
        return cls(
            first_token=now + first if first > 0 else None,
            total=now + total if total > 0 else None,
            first_token_seconds=first,
            total_seconds=total,
        )

    def next_token(self, first: bool) -> float | None:
        """The deadline for the next token: the earlier of the two while none came yet."""
        candidates = [d for d in (self.first_token if first else None, self.total) if d is not None]
        return min(candidates) if candidates else None

    def expired(self, first: bool) -> GatewayTimeout:
        """The error for a wait that ran past :meth:`next_token`."""
        if first and self.first_token is not None and (self.total is None or self.first_token <= self.total):
            return GatewayTimeout(
                f"No token was generated within first_token_timeout ({self.first_token_seconds:g} s).",
                code="first_token_timeout",
            )
        return GatewayTimeout(
            f"The generation ran past request_timeout ({self.total_seconds:g} s).", code="request_timeout"
        )


def loop_deadline(deadline: float | None) -> float | None:
    """A ``time.monotonic()`` deadline on the running loop's clock (for ``asyncio.timeout_at``)."""
    if deadline is None:
        return None
    return asyncio.get_running_loop().time() + (deadline - time.monotonic())


def apply_timeouts(jobs: Sequence[ChoiceJob], core: CoreSettings) -> Deadlines:
    """Give every choice of a request the same deadlines and its queue timeout."""
    deadlines = Deadlines.start(core)
    queue = core.queue_timeout if core.queue_timeout > 0 else None
    for job in jobs:
        job.deadlines = deadlines
        job.params = msgspec.structs.replace(job.params, queue_timeout=queue)
    return deadlines
