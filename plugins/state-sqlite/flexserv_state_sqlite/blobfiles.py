"""Blobs as files beside a SQLite database: written to a temporary name, synced,
then renamed into place before the record that names them is committed, so a
record never names a partial file. Names are generated here, never a client's."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

TMP_PREFIX = ".tmp-"
#: A file no record names is deleted at start-up once it is this old (seconds):
#: younger ones may be another process's upload in progress.
ORPHAN_GRACE = 3600.0


class DiskError(Exception):
    """Writing a blob file failed (a full disk, a read-only directory): the
    ``OSError`` is its cause. Not an ``OSError`` itself, so that it is never taken
    for an error of the chunks' iterator, which the caller gets unchanged."""


async def _disk(work: Callable[..., T], *args: Any) -> T:
    try:
        return await asyncio.to_thread(work, *args)
    except OSError as exc:
        raise DiskError(str(exc)) from exc


class BlobFiles:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, name: str) -> Path:
        return self.directory / name

    async def write(self, chunks: AsyncIterator[bytes]) -> tuple[str, int]:
        """Stream ``chunks`` to a new file; its name and size. On any error or
        cancellation the partial file is removed and the error raised; the
        file system's errors as :class:`DiskError`."""
        name = secrets.token_hex(16)
        tmp = self.directory / (TMP_PREFIX + name)
        handle = await _disk(open, tmp, "xb")
        size = 0
        try:
            try:
                async for chunk in chunks:
                    await _disk(handle.write, chunk)
                    size += len(chunk)
                await _disk(handle.flush)
                await _disk(os.fsync, handle.fileno())
            finally:
                with contextlib.suppress(OSError):  # after a failed flush: the file is deleted anyway
                    handle.close()
            await _disk(os.replace, tmp, self.path(name))
            await _disk(self._sync_directory)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        return name, size

    def remove(self, names: Collection[str | None]) -> None:
        """Delete the files of records already gone. One that cannot be deleted (a
        read-only directory) is logged and left to the start-up sweep: the commit
        that dropped its record stands, so its request must not fail."""
        for name in names:
            if not name:
                continue
            try:
                self.path(name).unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("state blobs %s: %s is left for the next start's sweep: %s", self.directory, name, exc)

    def sweep_orphans(self, named: set[str], grace: float = ORPHAN_GRACE) -> int:
        """Delete files no record names (a crash between rename and commit, or an
        upload killed mid-write) that are older than ``grace`` seconds."""
        cutoff = time.time() - grace
        removed = 0
        for entry in os.scandir(self.directory):
            name = entry.name
            key = name.removeprefix(TMP_PREFIX)
            if key in named and not name.startswith(TMP_PREFIX):
                continue
            with contextlib.suppress(FileNotFoundError):
                if entry.stat().st_mtime <= cutoff:
                    os.unlink(entry.path)
                    removed += 1
        if removed:
            log.info("state blobs %s: %d orphaned file(s) removed", self.directory, removed)
        return removed

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
