"""Blob streams, bounded while they are read: an upload never has to be held whole."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

from flexserv_core import PayloadTooLarge


async def bounded(
    chunks: AsyncIterable[bytes], max_bytes: int | None, param: str | None = None
) -> AsyncIterator[bytes]:
    """``chunks`` as they come, raising :class:`PayloadTooLarge` as soon as more than
    ``max_bytes`` arrived in all (so the backend discards what it staged)."""
    total = 0
    async for chunk in chunks:
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise TypeError(f"a blob chunk must be bytes, not {type(chunk).__name__}")
        total += len(chunk)
        if max_bytes is not None and total > max_bytes:
            raise PayloadTooLarge(f"The content is larger than the limit of {max_bytes} bytes.", param=param)
        if chunk:
            yield bytes(chunk)
