"""Waiting for a condition in tests, instead of sleeping for a guessed time.

A fixed ``sleep`` is either too short on a busy machine (a flaky test) or too long
everywhere else (a slow one). These helpers poll the condition itself and fail
with a clear message once a deadline passes::

    wait_until(lambda: server.registry.active_requests == 0)
    await wait_until_async(lambda: model.cancelled_sequences == 1, timeout=5)
    await wait_until_async(ready, timeout=30)  # ``async def ready() -> bool``
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0
DEFAULT_INTERVAL = 0.01


def _timed_out(timeout: float, message: str | None) -> AssertionError:
    return AssertionError(f"condition not reached within {timeout:g} s" + (f": {message}" if message else ""))


def wait_until(
    predicate: Callable[[], T],
    timeout: float = DEFAULT_TIMEOUT,
    *,
    interval: float = DEFAULT_INTERVAL,
    message: str | None = None,
) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns a truthy value,
    and return that value; raise :class:`AssertionError` (naming ``message``) if
    ``timeout`` seconds pass first. Blocks the calling thread: use
    :func:`wait_until_async` on an event loop."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise _timed_out(timeout, message)
        time.sleep(interval)


async def wait_until_async(
    predicate: Callable[[], T | Awaitable[T]],
    timeout: float = DEFAULT_TIMEOUT,
    *,
    interval: float = DEFAULT_INTERVAL,
    message: str | None = None,
) -> T:
    """:func:`wait_until` for coroutines: the event loop keeps running between checks,
    and ``predicate`` may be a coroutine function (e.g. one that asks the app over
    HTTP), whose result is awaited."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = predicate()
        result: T = await outcome if inspect.isawaitable(outcome) else outcome
        if result:
            return result
        if time.monotonic() >= deadline:
            raise _timed_out(timeout, message)
        await asyncio.sleep(interval)
