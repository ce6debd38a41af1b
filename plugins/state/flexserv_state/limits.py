"""How a put applies a collection's bounds, the same for every backend: given the
live records' sizes oldest first, which to evict (or that the put is refused)."""

from __future__ import annotations

from collections.abc import Iterable

from flexserv_core import PayloadTooLarge, QuotaExceeded
from flexserv_state.records import CollectionLimits


def over(limits: CollectionLimits, count: int, total: int, new_size: int) -> bool:
    """Whether a record of ``new_size`` bytes passes a bound beside ``count`` records of ``total`` bytes."""
    return (limits.max_items is not None and count + 1 > limits.max_items) or (
        limits.max_bytes is not None and total + new_size > limits.max_bytes
    )


def plan_eviction(
    limits: CollectionLimits,
    collection: str,
    new_size: int,
    count: int,
    total: int,
    oldest: Iterable[tuple[str, int]],
) -> list[str]:
    """The ids to delete so a record of ``new_size`` bytes fits beside the ``count``
    live records of ``total`` bytes; ``oldest`` yields them as ``(id, size)``, oldest
    first (the replaced record excluded), and is read only as far as needed. Raises
    :class:`QuotaExceeded` when the collection refuses instead of evicting, and
    :class:`PayloadTooLarge` when the record alone passes ``max_bytes``."""
    if limits.max_bytes is not None and new_size > limits.max_bytes:
        raise PayloadTooLarge(
            f"The record is {new_size} bytes; the {collection!r} store keeps at most {limits.max_bytes} bytes."
        )
    if limits.max_items is not None and limits.max_items == 0:
        raise QuotaExceeded(f"The {collection!r} store keeps nothing (its item limit is 0).")
    if not over(limits, count, total, new_size):
        return []
    if limits.when_full == "refuse":
        raise QuotaExceeded(f"The {collection!r} store is full ({count} records, {total} bytes): delete some first.")
    evict: list[str] = []
    for record_id, size in oldest:
        evict.append(record_id)
        count -= 1
        total -= size
        if not over(limits, count, total, new_size):
            break
    return evict
