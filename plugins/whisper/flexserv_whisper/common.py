"""What both Whisper backends share: device choice, language checks, one worker
thread per model, the request path of a loaded model and the load error."""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, TypeVar

import numpy as np
from flexserv_audio import Transcription, TranscriptionModel, TranscriptionSegment, TranscriptionTask, TranscriptionWord

from flexserv_core import (
    InvalidRequest,
    ModelLoadError,
    ModelSpec,
)

T = TypeVar("T")


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
    """One thread per model: Whisper decoders are not shared between threads.

    A job reaches the thread only once the one before it has ended: requests that
    wait their turn hold their audio here, where cancelling one lets go of it at
    once, never in the executor's queue, which keeps a cancelled job (and its
    audio) until the thread gets to it."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._turn = asyncio.Lock()

    async def run(self, fn: Callable[[], T]) -> T:
        await self._turn.acquire()
        try:
            job = asyncio.get_running_loop().run_in_executor(self._executor, fn)
        except BaseException:
            self._turn.release()
            raise
        job.add_done_callback(self._ended)
        # cancelled, the caller stops waiting; the turn passes when the thread is done
        return await asyncio.shield(job)

    def _ended(self, job: asyncio.Future[Any]) -> None:
        self._turn.release()
        if not job.cancelled():
            job.exception()  # its caller may be gone: don't log it as never retrieved

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecodeRequest:
    """One decode, checked: ``language`` is an ISO code, or ``None`` to detect it."""

    language: str | None
    prompt: str | None
    temperature: float
    task: TranscriptionTask = "transcribe"
    word_timestamps: bool = False


@dataclasses.dataclass(kw_only=True)
class Decoded:
    """A decode under way: ``pieces`` yields each segment with its words (lazily
    where the library decodes lazily); ``language`` is the ISO code used or detected."""

    pieces: Iterator[tuple[TranscriptionSegment, list[TranscriptionWord]]]
    language: str | None
    duration: float


_END = object()


class SerialWhisperModel(TranscriptionModel):
    """A loaded Whisper model that decodes on a :class:`SerialWorker` of its own.

    Subclasses set ``backend_name``, ``multilingual`` and ``can_translate`` (the same:
    English-only ``*.en`` models never learnt to translate) and implement :meth:`_decode`,
    which starts the decode of one request (on the worker thread, where its
    ``pieces`` are also consumed).
    """

    backend_name: ClassVar[str]
    multilingual: bool

    def __init__(self, spec: ModelSpec, *, device: str, dtype: str | None, worker_name: str) -> None:
        super().__init__(spec, device=device, dtype=dtype)
        self._languages = whisper_languages()
        self._worker = SerialWorker(worker_name)

    def _request(
        self, language: str | None, prompt: str | None, temperature: float, task: TranscriptionTask, words: bool
    ) -> DecodeRequest:
        code = check_language(language, multilingual=self.multilingual, languages=self._languages)
        if task == "translate" and not self.multilingual:
            raise InvalidRequest(
                f"The model '{self.spec.name}' is English-only and cannot translate; serve a multilingual Whisper model.",
                param="model",
                code="translation_unsupported",
            )
        if words:
            self._check_word_timestamps()
        return DecodeRequest(language=code, prompt=prompt, temperature=temperature, task=task, word_timestamps=words)

    def _check_word_timestamps(self) -> None:
        """Raise :class:`InvalidRequest` if this model cannot time words."""

    async def transcribe(
        self,
        audio: Any,
        *,
        language: str | None = None,
        prompt: str | None = None,
        temperature: float = 0.0,
        task: TranscriptionTask = "transcribe",
        word_timestamps: bool = False,
    ) -> Transcription:
        request = self._request(language, prompt, temperature, task, word_timestamps)
        samples = np.asarray(audio, dtype=np.float32)
        stop = threading.Event()
        try:
            return await self._worker.run(lambda: self._collect(samples, request, stop))
        finally:
            # cancelled (the client went away): a queued decode never starts, a
            # running one ends after its current segment
            stop.set()

    def _collect(self, audio: np.ndarray, request: DecodeRequest, stop: threading.Event) -> Transcription:
        decoded = self._decode(audio, request)
        segments: list[TranscriptionSegment] = []
        words: list[TranscriptionWord] = []
        for segment, segment_words in decoded.pieces:
            segments.append(segment)
            words.extend(segment_words)
            if stop.is_set():
                break  # nobody waits for the rest: don't decode it
        return Transcription(
            text="".join(s.text for s in segments).strip(),
            language=self._languages.get(decoded.language or "", decoded.language),
            duration=decoded.duration,
            segments=segments,
            words=words if request.word_timestamps else None,
        )

    def transcribe_stream(
        self, audio: Any, *, language: str | None = None, prompt: str | None = None, temperature: float = 0.0
    ) -> AsyncIterator[TranscriptionSegment]:
        request = self._request(language, prompt, temperature, "transcribe", False)
        return self._stream(np.asarray(audio, dtype=np.float32), request)

    async def _stream(self, audio: np.ndarray, request: DecodeRequest) -> AsyncIterator[TranscriptionSegment]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()

        def produce() -> None:
            # on the worker: hand each segment to the event loop as it is decoded;
            # a closed stream sets ``stop`` and the decode ends after this segment
            try:
                for segment, _words in self._decode(audio, request).pieces:
                    loop.call_soon_threadsafe(queue.put_nowait, segment)
                    if stop.is_set():
                        return
                loop.call_soon_threadsafe(queue.put_nowait, _END)
            except BaseException as exc:  # handed to the consumer, raised there
                loop.call_soon_threadsafe(queue.put_nowait, exc)

        job = asyncio.ensure_future(self._worker.run(produce))
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            # a job still waiting for its turn never runs; a running one ends after
            # its current segment, without being waited for here
            job.cancel()
            job.add_done_callback(lambda f: f.cancelled() or f.exception())

    @abc.abstractmethod
    def _decode(self, audio: np.ndarray, request: DecodeRequest) -> Decoded:
        """Start decoding ``audio`` (float32 at ``sampling_rate``). Runs on the worker."""

    def unload(self) -> None:
        """Stop the worker; subclasses then drop their weights."""
        self._worker.close()


def load_error(spec: ModelSpec, library: str, exc: Exception) -> ModelLoadError:
    """The error a backend raises when ``library`` could not load ``spec``."""
    return ModelLoadError(
        f"Could not load Whisper model '{spec.name}' from {spec.source!r} with {library}: {type(exc).__name__}: {exc}"
    )
