"""An upload's bytes on disk while its form is still arriving: bounded, nameless, gone when closed.

The multipart form may carry ``purpose`` (and ``expires_after``) after the file, so
nothing can be checked or stored until the form ends; the file is written here
meanwhile, never held in memory. The file is created without a name (``O_TMPFILE``
where the system has it, else unlinked at once by :func:`tempfile.TemporaryFile`),
so a cut upload, an error or a crash leaves nothing in the directory. A disk that
cannot hold the upload (full, read-only) is a 503 ``state_unavailable``, as in the store.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

from flexserv_core import FlexServer, StateUnavailable, default_cache_dir
from flexserv_files.content import check_file_size

T = TypeVar("T")

#: Bytes written and read back at once.
READ_CHUNK = 256 * 1024


def _unavailable(exc: OSError) -> StateUnavailable:
    return StateUnavailable(f"The upload could not be kept on the server's disk: {exc}.")


async def _disk(work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return await asyncio.to_thread(work, *args, **kwargs)
    except OSError as exc:
        raise _unavailable(exc) from exc


def spool_dir(server: FlexServer) -> Path:
    """Under the cache directory (the store's own disk), not the system's temporary one."""
    path = default_cache_dir(server.settings) / "files-spool"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unavailable(exc) from exc
    return path


class Spool:
    """``async with Spool(directory, limit) as spool``: :meth:`write_all`, then :meth:`chunks`."""

    def __init__(self, directory: Path, limit: int) -> None:
        self.directory = directory
        self.limit = limit
        self.size = 0
        self._file: IO[bytes] | None = None

    async def __aenter__(self) -> Spool:
        self._file = await _disk(tempfile.TemporaryFile, dir=self.directory)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._file is not None:
            await asyncio.to_thread(self._file.close)
            self._file = None

    @property
    def file(self) -> IO[bytes]:
        assert self._file is not None, "enter the spool first"
        return self._file

    async def write_all(self, chunks: AsyncIterator[bytes]) -> None:
        """Write every chunk, counting them against the limit (413 naming it past it);
        small chunks are gathered into writes of :data:`READ_CHUNK` bytes or more."""
        pending = bytearray()
        async for chunk in chunks:
            self.size += len(chunk)
            check_file_size(self.size, self.limit)
            pending += chunk
            if len(pending) >= READ_CHUNK:
                await _disk(self.file.write, bytes(pending))
                pending.clear()
        if pending:
            await _disk(self.file.write, bytes(pending))

    async def chunks(self) -> AsyncIterator[bytes]:
        """The spooled bytes from the start."""
        await _disk(self._rewind)
        while True:
            chunk: Any = await _disk(self.file.read, READ_CHUNK)
            if not chunk:
                return
            yield chunk

    def _rewind(self) -> None:
        self.file.flush()
        self.file.seek(0)
