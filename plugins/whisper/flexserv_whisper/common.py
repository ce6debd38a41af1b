"""What both Whisper backends share: device choice, language checks, one worker thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from flexserv_core.errors import InvalidRequest

T = TypeVar("T")


def pick_device(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def whisper_languages() -> dict[str, str]:
    """ISO code -> English name, as Whisper knows them (``"en": "english"``)."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    return dict(LANGUAGES)


def check_language(language: str | None, *, multilingual: bool, languages: dict[str, str]) -> str | None:
    """The ISO code to decode with, or ``None`` to detect; 400 on ``param="language"``."""
    if language is None or language == "":
        return None if multilingual else "en"
    code = language.strip().lower()
    by_name = {name: c for c, name in languages.items()}
    code = by_name.get(code, code)
    if code not in languages:
        raise InvalidRequest(
            f"'language' {language!r} is not a language Whisper knows; use an ISO-639-1 code such as 'en'.",
            param="language",
        )
    if not multilingual and code != "en":
        raise InvalidRequest(
            f"This model is English-only; 'language' must be 'en', not {language!r}.", param="language"
        )
    return code


class SerialWorker:
    """One thread per model: Whisper decoders are not shared between threads."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
