"""The testing kit's wait helpers: the value on success, a clear failure at the deadline."""

from __future__ import annotations

import itertools
import time

import pytest

from flexserv_core.testing import wait_until, wait_until_async


def test_wait_until_returns_the_first_truthy_value() -> None:
    counter = itertools.count()
    assert wait_until(lambda: next(counter) >= 3 and "done", interval=0) == "done"


def test_wait_until_fails_at_the_deadline_naming_what_it_waited_for() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"within 0\.05 s: the gate opened"):
        wait_until(lambda: False, 0.05, message="the gate opened")
    assert 0.05 <= time.monotonic() - started < 2


async def test_wait_until_async_awaits_coroutine_predicates() -> None:
    calls = 0

    async def ready() -> int:
        nonlocal calls
        calls += 1
        return calls if calls == 3 else 0

    assert await wait_until_async(ready, interval=0) == 3
    with pytest.raises(AssertionError, match=r"not reached within 0\.02 s"):
        await wait_until_async(lambda: None, 0.02)
