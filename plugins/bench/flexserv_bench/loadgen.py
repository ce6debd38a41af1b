"""One concurrency level: ``concurrency`` client tasks share ``requests`` requests.

Each client task sends its next request as soon as its previous one ends (a
closed loop), so exactly ``min(concurrency, remaining)`` requests are in flight.
Request ``i`` uses prompt ``i % len(prompts)``. The HTTP client talks to the given
base URL only: no proxies from the environment, no redirects followed.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

import httpx

from flexserv_bench.client import RequestResult, RequestSpec, stream_request

#: Upper bounds that keep a mistyped flag from opening thousands of sockets.
MAX_CONCURRENCY = 1024
MAX_REQUESTS = 100_000


@dataclass(slots=True)
class Progress:
    """Counters of one level, shown as a single line rewritten with ``\\r``."""

    concurrency: int
    total: int
    stream: TextIO | None = None
    done: int = 0
    tokens: int = 0
    errors: int = 0
    _shown: str = ""

    def line(self) -> str:
        return f"c={self.concurrency} {self.done}/{self.total} requests, {self.tokens} tokens, {self.errors} errors"

    def show(self, final: bool = False) -> None:
        """Redraw the line if it changed (always for the final one)."""
        if self.stream is None:
            return
        line = self.line()
        if line == self._shown and not final:
            return
        self._shown = line
        self.stream.write("\r" + line + ("\n" if final else ""))
        self.stream.flush()

    def token(self) -> None:
        self.tokens += 1


async def _refresh(progress: Progress, interval: float) -> None:
    while True:
        progress.show()
        await asyncio.sleep(interval)


async def run_level(
    base_url: str,
    spec: RequestSpec,
    prompts: Sequence[str],
    *,
    concurrency: int,
    requests: int,
    api_key: str | None = None,
    progress_stream: TextIO | None = sys.stderr,
    count_tokens: Callable[[str], int] | None = None,
    refresh_interval: float = 0.2,
) -> tuple[list[RequestResult], float]:
    """Run one level; return the results in request order and its wall time (s).

    ``count_tokens``, when given, replaces the server's usage figure by a count
    over the streamed text (servers disagree on whether the end-of-sequence token
    counts).
    """
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"concurrency must be within 1..{MAX_CONCURRENCY}, not {concurrency}")
    if not 1 <= requests <= MAX_REQUESTS:
        raise ValueError(f"requests must be within 1..{MAX_REQUESTS}, not {requests}")
    if not prompts:
        raise ValueError("no prompts")
    workers = min(concurrency, requests)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
    results: list[RequestResult | None] = [None] * requests
    progress = Progress(concurrency=concurrency, total=requests, stream=progress_stream)
    next_index = 0

    async def client_task(client: httpx.AsyncClient) -> None:
        nonlocal next_index
        while next_index < requests:
            index = next_index
            next_index += 1  # no await between the check and the increment: one event loop, no race
            result = await stream_request(client, spec, prompts[index % len(prompts)], on_token=progress.token)
            if count_tokens is not None and result.ok:
                result.output_tokens = count_tokens(result.text)
            results[index] = result
            progress.done += 1
            progress.errors += 0 if result.ok else 1

    async with httpx.AsyncClient(
        base_url=base_url.rstrip("/"),
        headers=headers,
        limits=limits,
        timeout=httpx.Timeout(spec.timeout, connect=min(spec.timeout, 10.0)),
        trust_env=False,
        follow_redirects=False,
    ) as client:
        interactive = progress_stream is not None and progress_stream.isatty()
        refresher = asyncio.create_task(_refresh(progress, refresh_interval if interactive else 5 * refresh_interval))
        started = time.perf_counter()
        try:
            await asyncio.gather(*(client_task(client) for _ in range(workers)))
        finally:
            duration = time.perf_counter() - started
            refresher.cancel()
            await asyncio.gather(refresher, return_exceptions=True)
    progress.show(final=True)
    return [r for r in results if r is not None], duration
