"""The budget the OCR and audio plugins bound decoded pages and audio with."""

from __future__ import annotations

import asyncio

from flexserv_batching import Budget


async def test_waiters_go_in_order_a_cancelled_one_frees_its_place_and_a_share_gives_back_what_it_did_not_use() -> None:
    budget = Budget(10)
    order: list[str] = []

    async def use(name: str, units: int, used: int, release: asyncio.Event) -> None:
        async with budget.hold(units) as share:
            order.append(name)
            share.shrink(used)
            await release.wait()

    hold_first, hold_short, done = asyncio.Event(), asyncio.Event(), asyncio.Event()
    done.set()
    first = asyncio.create_task(use("first", 10, 10, hold_first))
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(use("cancelled", 10, 10, done))
    short = asyncio.create_task(use("short", 10, 3, hold_short))  # reserves the limit, keeps 3
    after = asyncio.create_task(use("after", 7, 7, done))
    await asyncio.sleep(0.01)
    assert order == ["first"] and budget.held == 10
    cancelled.cancel()
    await asyncio.sleep(0.01)
    assert order == ["first"], "the others wait for the first"
    hold_first.set()
    await asyncio.wait_for(after, 5)  # fits in what the short one gave back, while it holds the rest
    assert order == ["first", "short", "after"] and budget.held == 3
    hold_short.set()
    await asyncio.gather(first, short, cancelled, return_exceptions=True)
    assert cancelled.cancelled() and budget.held == 0 and not budget._waiting
    async with budget.hold(50) as share:  # over the budget: takes all of it
        assert budget.held == 10 and share.units == 10
    assert budget.held == 0
