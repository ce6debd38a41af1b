"""Settings of the whisper plugin (``--whisper-*``)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec


class WhisperSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    whisper_device: Annotated[
        Literal["auto", "cpu", "cuda"],
        msgspec.Meta(description="Device for Whisper models; auto picks CUDA if present."),
    ] = "auto"
    whisper_compute_type: Annotated[
        str,
        msgspec.Meta(
            description="CTranslate2 compute type for faster-whisper (int8, int8_float16, float16, float32, default); "
            "'auto' is int8 on CPU and float16 on CUDA."
        ),
    ] = "auto"
    whisper_beam_size: Annotated[
        int, msgspec.Meta(ge=1, le=16, description="Beam size of Whisper decoding (1 is greedy, fastest on CPU).")
    ] = 1
    whisper_cpu_threads: Annotated[
        int, msgspec.Meta(ge=0, description="CPU threads per faster-whisper model (0: CTranslate2's default).")
    ] = 0
