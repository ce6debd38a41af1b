"""The contract a transcription backend implements: :class:`TranscriptionModel`
and the :class:`Transcription` it returns."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from typing import Any, Literal

import msgspec

from flexserv_core import LoadedModel, ModelKind


class TranscriptionSegment(msgspec.Struct):
    """One timed piece of a transcription. The fields after ``text`` are the
    decoder statistics OpenAI's ``verbose_json`` reports; backends fill what they know."""

    id: int
    start: float
    end: float
    text: str
    seek: int = 0
    tokens: list[int] = msgspec.field(default_factory=list)
    temperature: float = 0.0
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0


class TranscriptionWord(msgspec.Struct):
    """One word with its time in the audio (``timestamp_granularities=["word"]``)."""

    word: str
    start: float
    end: float


class Transcription(msgspec.Struct, kw_only=True):
    text: str
    language: str | None = None
    duration: float = 0.0
    segments: list[TranscriptionSegment] = msgspec.field(default_factory=list)
    #: Filled when word timestamps were asked for: in order, within the audio.
    words: list[TranscriptionWord] | None = None


#: What a transcription model is asked to do: write down the speech in its own
#: language, or translate it into English (``/v1/audio/translations``).
TranscriptionTask = Literal["transcribe", "translate"]


class TranscriptionModel(LoadedModel):
    kind = ModelKind.TRANSCRIPTION

    #: Rate (Hz) uploaded audio is decoded and resampled to (by this plugin's routes).
    sampling_rate: int = 16_000
    #: Whether ``task="translate"`` (speech in any language to English text) is served;
    #: ``/v1/audio/translations`` answers a 400 for a model that cannot.
    can_translate: bool = False

    @abc.abstractmethod
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
        """Transcribe mono float32 ``audio`` (a numpy array at ``sampling_rate``).

        The routes pass ``task`` and ``word_timestamps`` only when a request asks for
        them (a translation; word timestamps), after checking ``can_translate``. A
        model that cannot time words raises :class:`InvalidRequest` on
        ``param="timestamp_granularities"``."""

    def transcribe_stream(
        self,
        audio: Any,
        *,
        language: str | None = None,
        prompt: str | None = None,
        temperature: float = 0.0,
    ) -> AsyncIterator[TranscriptionSegment]:
        """The segments of a transcription as they are decoded (``stream=True``).

        Check the request when called (raise :class:`InvalidRequest` then, before
        the response starts); the iterator yields segments in order, and closing it
        early must stop decoding. The default decodes everything with
        :meth:`transcribe`, then yields its segments."""

        async def segments() -> AsyncIterator[TranscriptionSegment]:
            result = await self.transcribe(audio, language=language, prompt=prompt, temperature=temperature)
            if result.segments:
                for segment in result.segments:
                    yield segment
            elif result.text:
                yield TranscriptionSegment(id=0, start=0.0, end=result.duration, text=result.text)

        return segments()
