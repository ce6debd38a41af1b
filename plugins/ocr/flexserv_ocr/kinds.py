"""The ``ocr`` model kind: what an OCR engine returns and the model class routes talk to.

A page image goes in; recognised lines come out in reading order, each with its
text, a confidence in [0, 1] and an axis-aligned box in the page's pixels. The
routes only know :class:`OcrModel`, so another engine is one subclass away.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Sequence
from typing import Any

import msgspec
from flexserv_batching import MicroBatcher

from flexserv_core import EngineStats, InvalidRequest, LoadedModel

OCR = "ocr"


class Box(msgspec.Struct, array_like=False):
    x1: float
    y1: float
    x2: float
    y2: float


class OcrLine(msgspec.Struct, kw_only=True):
    text: str
    confidence: float
    box: Box


class OcrPage(msgspec.Struct, kw_only=True):
    """One page read: ``source`` is ``"ocr"`` or ``"text_layer"`` (a PDF's own text)."""

    width: int
    height: int
    lines: list[OcrLine]
    source: str = "ocr"
    #: Engine time spent on this page (its share of its micro-batch).
    seconds: float = 0.0

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)

    @property
    def confidence(self) -> float:
        if not self.lines:
            return 0.0
        return sum(line.confidence for line in self.lines) / len(self.lines)


class OcrBudget:
    """The OCR time one request may spend (``--ocr-timeout``): the engine's time on its
    pages (each page's share of its micro-batch) and the time its pages take to decode
    or render, measured where that work runs. Time spent waiting (for the engine, behind
    other requests' pages, or for a worker thread) is not counted, so a busy server
    queues a request rather than failing it. Shared by the event loop and the worker
    threads that add to it."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self._spent = 0.0
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        with self._lock:
            self._spent += seconds

    @property
    def spent(self) -> float:
        return self._spent

    @property
    def left(self) -> float:
        """Seconds left (zero or less: none)."""
        return self.limit - self._spent

    @property
    def exhausted(self) -> bool:
        return self._spent >= self.limit


class PageJob(msgspec.Struct, kw_only=True):
    """One page image to read, and its request's OCR time budget (``None``: unbounded)."""

    image: Any  # PIL.Image.Image, RGB
    languages: list[str] | None = None
    budget: OcrBudget | None = None

    @property
    def seconds_left(self) -> float:
        return float("inf") if self.budget is None else self.budget.left


class OcrTimeLimit(InvalidRequest):
    """A request ran past ``--ocr-timeout``: its remaining pages were not read."""

    status_code = 422
    default_code = "ocr_time_limit"


class OcrModel(LoadedModel):
    """A loaded OCR engine. Pages of concurrent requests meet in one
    :class:`MicroBatcher`, so the engine is only ever used by its worker thread."""

    kind = OCR

    #: Languages the engine reads, as given to it (``None``: whatever its models cover).
    languages_supported: tuple[str, ...] | None = None

    def __init__(self, spec: Any, *, max_batch: int, max_wait: float, device: str = "cpu") -> None:
        super().__init__(spec, device=device, dtype="float32")
        self.batcher: MicroBatcher[PageJob, OcrPage] = MicroBatcher(
            self._run_batch, max_batch=max_batch, max_wait=max_wait, name=f"ocr-{spec.name}"
        )
        self._counts_lock = threading.Lock()
        self.pages_read = 0
        self.seconds_reading = 0.0

    @abc.abstractmethod
    def read_page(self, image: Any, languages: list[str] | None) -> list[OcrLine]:
        """Recognise one RGB page image (in the worker thread): its lines, in any order."""

    def read_pages(self, jobs: Sequence[PageJob]) -> list[list[OcrLine] | BaseException]:
        """Read several pages at once; engines that batch across images override this."""
        out: list[list[OcrLine] | BaseException] = []
        for job in jobs:
            try:
                out.append(self.read_page(job.image, job.languages))
            except InvalidRequest as exc:
                out.append(exc)
        return out

    def check_languages(self, languages: list[str] | None) -> None:
        """Refuse languages this engine cannot read (400 naming those it can)."""
        if languages and self.languages_supported is None:
            raise InvalidRequest(
                f"OCR model '{self.spec.name}' reads the languages its models were trained on and takes no "
                "'languages'; leave it out, or use an engine that takes them (tesseract).",
                param="languages",
                code="unsupported_parameter",
            )
        if languages and self.languages_supported is not None:
            unknown = [lang for lang in languages if lang not in self.languages_supported]
            if unknown:
                raise InvalidRequest(
                    f"OCR model '{self.spec.name}' has no data for {', '.join(map(repr, unknown))}; "
                    f"installed: {', '.join(self.languages_supported)}.",
                    param="languages",
                    code="unsupported_language",
                )

    async def read(self, job: PageJob) -> OcrPage:
        """Read one page through the micro-batcher (cancelling the await drops the page)."""
        return await self.batcher.submit(job)

    def _run_batch(self, jobs: Sequence[PageJob]) -> list[OcrPage | BaseException]:
        dropped = {id(job) for job in jobs if job.budget is not None and job.budget.exhausted}
        live = [job for job in jobs if id(job) not in dropped]
        started = time.perf_counter()
        results = iter(self.read_pages(live) if live else [])
        elapsed = time.perf_counter() - started
        share = elapsed / len(live) if live else 0.0
        out: list[OcrPage | BaseException] = []
        for job in jobs:
            if id(job) in dropped:
                out.append(OcrTimeLimit("The OCR time limit passed before this page was read.", param=None))
                continue
            if job.budget is not None:
                job.budget.add(share)
            lines = next(results)
            if isinstance(lines, BaseException):
                out.append(lines)
                continue
            width, height = job.image.size
            out.append(OcrPage(width=width, height=height, lines=reading_order(lines), seconds=share))
        with self._counts_lock:
            self.pages_read += len(live)
            self.seconds_reading += elapsed
        return out

    def stats(self) -> EngineStats:
        return self.batcher.stats()

    def unload(self) -> None:
        self.batcher.close()


def reading_order(lines: list[OcrLine]) -> list[OcrLine]:
    """Top to bottom, then left to right within a row: lines whose vertical centres
    lie within half a line height of each other share a row."""
    ordered = sorted(lines, key=lambda line: (line.box.y1 + line.box.y2) / 2)
    rows: list[list[OcrLine]] = []
    for line in ordered:
        centre = (line.box.y1 + line.box.y2) / 2
        if rows:
            last = rows[-1][0]
            last_centre = (last.box.y1 + last.box.y2) / 2
            height = max(last.box.y2 - last.box.y1, line.box.y2 - line.box.y1, 1.0)
            if abs(centre - last_centre) < height / 2:
                rows[-1].append(line)
                continue
        rows.append([line])
    return [line for row in rows for line in sorted(row, key=lambda line: line.box.x1)]
