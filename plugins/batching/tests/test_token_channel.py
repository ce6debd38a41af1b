"""TokenChannel: the hand-off from an engine thread to a request's coroutine."""

from __future__ import annotations

import asyncio
import threading
from contextlib import aclosing

import pytest
from flexserv_batching import EngineToken, TokenChannel

from flexserv_core import ServiceUnavailable


def _from_thread(channel: TokenChannel, items: list[EngineToken | BaseException]) -> threading.Thread:
    thread = threading.Thread(target=lambda: [channel.put(item) for item in items])
    thread.start()
    return thread


async def test_tokens_arrive_in_order_until_the_finishing_one() -> None:
    channel = TokenChannel()
    abandoned: list[bool] = []
    items: list[EngineToken | BaseException] = [EngineToken(token_id=i) for i in range(5)]
    items.append(EngineToken(token_id=5, finish_reason="stop"))
    items.append(EngineToken(token_id=99))  # after the end: never read
    _from_thread(channel, items).join()
    got = [t.token_id async for t in channel.tokens(lambda: abandoned.append(True))]
    assert got == [0, 1, 2, 3, 4, 5]
    assert abandoned == []


async def test_an_error_the_engine_puts_is_raised_and_is_not_an_abandon() -> None:
    channel = TokenChannel()
    abandoned: list[bool] = []
    _from_thread(channel, [EngineToken(token_id=1), ServiceUnavailable("engine stopped")]).join()
    got: list[int] = []
    with pytest.raises(ServiceUnavailable, match="engine stopped"):
        async for token in channel.tokens(lambda: abandoned.append(True)):
            got.append(token.token_id)
    assert got == [1]
    assert abandoned == []


async def test_closing_early_tells_the_engine_once() -> None:
    channel = TokenChannel()
    abandoned: list[bool] = []
    _from_thread(channel, [EngineToken(token_id=i) for i in range(3)]).join()
    async with aclosing(channel.tokens(lambda: abandoned.append(True))) as tokens:
        async for _ in tokens:
            break
    assert abandoned == [True]


async def test_a_cancelled_consumer_is_an_abandon() -> None:
    channel = TokenChannel()
    abandoned = asyncio.Event()

    async def consume() -> None:
        async for _ in channel.tokens(abandoned.set):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.01)  # waiting on an empty channel
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert abandoned.is_set()


def test_put_after_the_loop_closed_reports_nobody_listens() -> None:
    loop = asyncio.new_event_loop()
    channel = TokenChannel(loop)
    assert channel.put(EngineToken(token_id=1))
    loop.close()
    assert not channel.put(EngineToken(token_id=2))
