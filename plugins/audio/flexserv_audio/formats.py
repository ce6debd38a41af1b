"""Rendering a :class:`Transcription` in each of OpenAI's ``response_format`` values."""

from __future__ import annotations

from typing import Any

from flexserv_audio import Transcription, TranscriptionSegment


def _timestamp(seconds: float, separator: str) -> str:
    millis = max(0, round(seconds * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def _segments(result: Transcription) -> list[TranscriptionSegment]:
    if result.segments:
        return result.segments
    text = result.text.strip()
    return [TranscriptionSegment(id=0, start=0.0, end=result.duration, text=text)] if text else []


def to_srt(result: Transcription) -> str:
    blocks = [
        f"{i}\n{_timestamp(s.start, ',')} --> {_timestamp(s.end, ',')}\n{s.text.strip()}\n"
        for i, s in enumerate(_segments(result), start=1)
    ]
    return "\n".join(blocks)


def to_vtt(result: Transcription) -> str:
    blocks = [f"{_timestamp(s.start, '.')} --> {_timestamp(s.end, '.')}\n{s.text.strip()}\n" for s in _segments(result)]
    return "WEBVTT\n\n" + "\n".join(blocks)


def to_verbose_json(result: Transcription, *, task: str = "transcribe", segments: bool = True) -> dict[str, Any]:
    """OpenAI's ``verbose_json``: ``segments`` unless only words were asked for, ``words`` when timed."""
    body: dict[str, Any] = {
        "task": task,
        "language": result.language or "unknown",
        "duration": round(result.duration, 3),
        "text": result.text,
    }
    if segments:
        body["segments"] = [
            {
                "id": s.id,
                "seek": s.seek,
                "start": round(s.start, 3),
                "end": round(s.end, 3),
                "text": s.text,
                "tokens": s.tokens,
                "temperature": s.temperature,
                "avg_logprob": s.avg_logprob,
                "compression_ratio": s.compression_ratio,
                "no_speech_prob": s.no_speech_prob,
            }
            for s in _segments(result)
        ]
    if result.words is not None:
        body["words"] = [{"word": w.word, "start": round(w.start, 3), "end": round(w.end, 3)} for w in result.words]
    return body


def render(
    result: Transcription, response_format: str, *, task: str = "transcribe", segments: bool = True
) -> tuple[Any, str]:
    """``(content, media_type)`` for a Litestar response.

    Text media types carry no charset here: Litestar appends ``; charset=utf-8`` to
    every ``text/*`` type itself (naming it here doubled it)."""
    if response_format == "text":
        return result.text, "text/plain"
    if response_format == "srt":
        return to_srt(result), "text/plain"
    if response_format == "vtt":
        return to_vtt(result), "text/vtt"
    if response_format == "verbose_json":
        return to_verbose_json(result, task=task, segments=segments), "application/json"
    return {"text": result.text}, "application/json"
