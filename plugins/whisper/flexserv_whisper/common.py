"""What both Whisper backends share: device choice, language checks, one worker
thread per model, the request path of a loaded model and the load error."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, TypeVar

import numpy as np

from flexserv_core import InvalidRequest, ModelLoadError, ModelSpec, Transcription, TranscriptionModel

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


class SerialWhisperModel(TranscriptionModel):
    """A loaded Whisper model that decodes on a :class:`SerialWorker` of its own.

    Subclasses set ``backend_name`` and ``multilingual`` and implement :meth:`_run`,
    the blocking decode of one request (called on the worker thread).
    """

    backend_name: ClassVar[str]
    multilingual: bool

    def __init__(self, spec: ModelSpec, *, device: str, dtype: str | None, worker_name: str) -> None:
        super().__init__(spec, device=device, dtype=dtype)
        self._languages = whisper_languages()
        self._worker = SerialWorker(worker_name)

    async def transcribe(
        self, audio: Any, *, language: str | None = None, prompt: str | None = None, temperature: float = 0.0
    ) -> Transcription:
        code = check_language(language, multilingual=self.multilingual, languages=self._languages)
        samples = np.asarray(audio, dtype=np.float32)
        return await self._worker.run(lambda: self._run(samples, code, prompt, temperature))

    @abc.abstractmethod
    def _run(self, audio: np.ndarray, language: str | None, prompt: str | None, temperature: float) -> Transcription:
        """Decode ``audio`` (float32 at ``sampling_rate``); ``language`` is an ISO
        code, or ``None`` to detect it."""

    def unload(self) -> None:
        """Stop the worker; subclasses then drop their weights."""
        self._worker.close()


def load_error(spec: ModelSpec, library: str, exc: Exception) -> ModelLoadError:
    """The error a backend raises when ``library`` could not load ``spec``."""
    return ModelLoadError(
        f"Could not load Whisper model '{spec.name}' from {spec.source!r} with {library}: {type(exc).__name__}: {exc}"
    )
