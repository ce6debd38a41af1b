"""Pieces of the transcription routes without a model: how streamed deltas join,
the default ``transcribe_stream`` of a backend's model, and the response formats."""

from __future__ import annotations

from typing import Any

import pytest
from flexserv_audio import Transcription, TranscriptionModel, TranscriptionSegment, TranscriptionTask, TranscriptionWord
from flexserv_audio.formats import render
from flexserv_audio.routes import DeltaJoiner

from flexserv_core import (
    ModelKind,
    ModelSpec,
)


@pytest.mark.parametrize(
    "pieces",
    [
        [" Please send", " the report.", ""],
        ["  ", " Hello ", "  world  ", " "],
        [" a\n", "b"],
        [],
        ["   "],
    ],
)
def test_deltas_join_to_the_non_streamed_text(pieces: list[str]) -> None:
    joiner = DeltaJoiner()
    deltas = [joiner.add(p) for p in pieces]
    assert "".join(deltas) == joiner.text == "".join(pieces).strip()
    assert all(d == "" or (d.strip() and d.rstrip() == d) for d in deltas)


class OneShotModel(TranscriptionModel):
    """A backend's model with only ``transcribe``: the default stream must still work."""

    def __init__(self, segments: list[TranscriptionSegment], text: str) -> None:
        super().__init__(ModelSpec(name="one", kind=ModelKind.TRANSCRIPTION, source="x"))
        self.result = Transcription(text=text, duration=2.0, segments=segments)

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
        return self.result

    def unload(self) -> None:
        pass


async def test_default_stream_yields_the_segments_or_the_text() -> None:
    segments = [
        TranscriptionSegment(id=0, start=0, end=1, text=" a"),
        TranscriptionSegment(id=1, start=1, end=2, text=" b"),
    ]
    model = OneShotModel(segments, "a b")
    assert not model.can_translate
    assert [s.text async for s in model.transcribe_stream(None)] == [" a", " b"]
    bare = OneShotModel([], "just text")
    assert [(s.text, s.end) async for s in bare.transcribe_stream(None)] == [("just text", 2.0)]
    assert [s async for s in OneShotModel([], "").transcribe_stream(None)] == []


def test_formats_and_media_types() -> None:
    words = [TranscriptionWord(word=" Hi", start=0.1, end=0.4), TranscriptionWord(word=" there", start=0.5, end=0.9)]
    result = Transcription(
        text="Hi there",
        language="english",
        duration=1.0,
        segments=[TranscriptionSegment(id=0, start=0, end=1, text=" Hi there")],
        words=words,
    )
    # Litestar adds the charset to text/* types: naming it here doubled it
    assert render(result, "text") == ("Hi there", "text/plain")
    assert render(result, "srt")[1] == "text/plain" and render(result, "vtt")[1] == "text/vtt"
    body, media = render(result, "verbose_json", task="translate", segments=False)
    assert media == "application/json" and body["task"] == "translate" and "segments" not in body
    assert body["words"] == [{"word": " Hi", "start": 0.1, "end": 0.4}, {"word": " there", "start": 0.5, "end": 0.9}]
    plain, _ = render(Transcription(text="x", duration=1.0), "verbose_json")
    assert "words" not in plain and plain["segments"][0]["text"] == "x"
