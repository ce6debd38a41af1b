"""Tesseract through its command line (Debian's ``tesseract-ocr``): TSV words grouped into lines.

Each page is its own process, so the pages of one micro-batch run in parallel
(one process per core) and a page that runs past what is left of its request's OCR time
is killed, not waited for.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from flexserv_core import InvalidRequest, ModelLoadError
from flexserv_ocr.kinds import Box, OcrLine, OcrModel, OcrTimeLimit, PageJob

#: ISO 639-1 codes clients send, and Tesseract's own names for the common ones.
ISO_TO_TESSERACT = {
    "en": "eng", "de": "deu", "fr": "fra", "es": "spa", "it": "ita", "pt": "por", "nl": "nld",
    "pl": "pol", "ru": "rus", "zh": "chi_sim", "ja": "jpn", "ko": "kor", "ar": "ara", "tr": "tur",
}  # fmt: skip


def tesseract_binary() -> str | None:
    return shutil.which("tesseract")


def installed_languages(binary: str) -> tuple[str, ...]:
    out = subprocess.run([binary, "--list-langs"], capture_output=True, text=True, timeout=30, check=False)
    names = [line.strip() for line in out.stdout.splitlines()[1:] if line.strip()]
    return tuple(name for name in names if name != "osd")


def parse_tsv(tsv: str) -> list[OcrLine]:
    """Tesseract's TSV (level 5 rows are words) as lines: words of one
    (block, paragraph, line) joined by spaces, boxes merged, confidence the mean."""
    groups: dict[tuple[str, str, str], list[tuple[str, float, int, int, int, int]]] = {}
    for row in tsv.splitlines()[1:]:
        cells = row.split("\t")
        if len(cells) < 12 or cells[0] != "5" or not cells[11].strip():
            continue
        left, top, width, height = (int(c) for c in cells[6:10])
        conf = max(0.0, float(cells[10])) / 100.0
        groups.setdefault((cells[2], cells[3], cells[4]), []).append(
            (cells[11].strip(), conf, left, top, left + width, top + height)
        )
    lines = []
    for words in groups.values():
        lines.append(
            OcrLine(
                text=" ".join(w[0] for w in words),
                confidence=sum(w[1] for w in words) / len(words),
                box=Box(
                    x1=min(w[2] for w in words),
                    y1=min(w[3] for w in words),
                    x2=max(w[4] for w in words),
                    y2=max(w[5] for w in words),
                ),
            )
        )
    return lines


class TesseractModel(OcrModel):
    def __init__(self, spec: Any, binary: str, *, max_batch: int, max_wait: float) -> None:
        super().__init__(spec, max_batch=max_batch, max_wait=max_wait)
        self.binary = binary
        self.installed = installed_languages(binary)
        if not self.installed:
            raise ModelLoadError(f"Tesseract at {binary} has no language data: install tesseract-ocr-eng.")
        self.languages_supported = tuple(
            sorted({*self.installed, *(k for k, v in ISO_TO_TESSERACT.items() if v in self.installed)})
        )
        self._pool = ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1), thread_name_prefix="tesseract")

    def _language_arg(self, languages: list[str] | None) -> str:
        names = [ISO_TO_TESSERACT.get(lang, lang) for lang in languages or ["eng"]]
        return "+".join(dict.fromkeys(names))

    def _read(self, image: Any, languages: list[str] | None, remaining: float) -> list[OcrLine]:
        """``remaining``: the seconds of its request's OCR time left when the page started."""
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        if remaining <= 0:
            raise OcrTimeLimit("The OCR time limit passed before this page was read.")
        try:
            done = subprocess.run(
                [self.binary, "stdin", "stdout", "-l", self._language_arg(languages), "tsv"],
                input=buffer.getvalue(),
                capture_output=True,
                timeout=None if remaining == float("inf") else remaining,
                check=False,
                env={**os.environ, "OMP_THREAD_LIMIT": "1"},
            )
        except subprocess.TimeoutExpired:
            raise OcrTimeLimit("The OCR time limit passed while this page was being read.") from None
        if done.returncode != 0:
            message = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
            raise InvalidRequest(f"Tesseract could not read the page: {message[0]}", code="ocr_failed")
        return parse_tsv(done.stdout.decode("utf-8", errors="replace"))

    def read_page(self, image: Any, languages: list[str] | None) -> list[OcrLine]:
        return self._read(image, languages, float("inf"))

    def read_pages(self, jobs: Sequence[PageJob]) -> list[list[OcrLine] | BaseException]:
        futures = [self._pool.submit(self._read, job.image, job.languages, job.seconds_left) for job in jobs]
        out: list[list[OcrLine] | BaseException] = []
        for future in futures:
            try:
                out.append(future.result())
            except InvalidRequest as exc:
                out.append(exc)
        return out

    def unload(self) -> None:
        super().unload()
        self._pool.shutdown(wait=True)
