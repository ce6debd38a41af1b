"""A Whisper model's worker takes one decode at a time: a request waiting for its
turn that is cancelled (its client went away) lets go of its audio at once, and
never decodes, instead of staying in the executor's queue until the worker gets
to it."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import weakref
from typing import Any

import numpy as np
from flexserv_whisper.common import Decoded, DecodeRequest, SerialWhisperModel

from flexserv_core import ModelKind, ModelSpec

SECOND = np.zeros(16_000, dtype=np.float32)


class GatedWhisper(SerialWhisperModel):
    """Each decode waits for ``gate``; ``decodes`` counts them."""

    backend_name = "gated"
    multilingual = False

    def __init__(self) -> None:
        spec = ModelSpec(name="gated", kind=ModelKind.TRANSCRIPTION, source="gated://")
        super().__init__(spec, device="cpu", dtype=None, worker_name="gated")
        self.gate, self.started = threading.Event(), threading.Event()
        self.decodes = 0

    def _decode(self, audio: np.ndarray, request: DecodeRequest) -> Decoded:
        self.decodes += 1
        self.started.set()
        assert self.gate.wait(10)
        return Decoded(pieces=iter(()), language="en", duration=len(audio) / self.sampling_rate)


async def _cancelled(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_a_request_cancelled_while_it_waits_for_the_worker_lets_go_of_its_audio() -> None:
    model = GatedWhisper()
    try:
        first = asyncio.create_task(model.transcribe(SECOND))
        assert await asyncio.to_thread(model.started.wait, 5)
        audio = SECOND.copy()
        held = weakref.ref(audio)
        waiting = asyncio.create_task(model.transcribe(audio))
        streamed = model.transcribe_stream(SECOND.copy())
        stream_waits = asyncio.ensure_future(anext(aiter(streamed), None))
        del audio
        await asyncio.sleep(0.05)
        await _cancelled(waiting)
        await _cancelled(stream_waits)
        await streamed.aclose()  # type: ignore[attr-defined]
        gc.collect()
        assert held() is None, "the worker still holds the audio of a cancelled request"
        model.gate.set()
        assert (await first).duration == 1.0
        assert (await model.transcribe(SECOND)).duration == 1.0
        assert model.decodes == 2, "a cancelled request was decoded"
    finally:
        model.gate.set()
        model.unload()
