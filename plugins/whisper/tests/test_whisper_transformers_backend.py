"""The transformers Whisper backend, with a tiny random Whisper built here (offline):
configured with ``--model transcription:NAME=DIR`` and loaded by the same code as
any Hub checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flexserv_whisper.hf import TransformersWhisperModel

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[3] / "tests" / "data"
NAME = "tiny-random-whisper"


def build_tiny_random_whisper(out: Path) -> None:
    """An English-only Whisper with random weights, a byte-level tokenizer with
    Whisper's special and timestamp tokens, and the standard feature extractor."""
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizer,
    )
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {char: i for i, char in enumerate(bytes_to_unicode().values())}
    specials = [
        "<|endoftext|>",
        "<|startoftranscript|>",
        "<|en|>",
        "<|translate|>",
        "<|transcribe|>",
        "<|startoflm|>",
        "<|startofprev|>",
        "<|nocaptions|>",
        "<|notimestamps|>",
    ]
    timestamps = [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
    for token in specials + timestamps:
        vocab[token] = len(vocab)
    tokenizer = WhisperTokenizer(vocab=dict(vocab), merges=[])
    tokenizer.add_special_tokens({"additional_special_tokens": specials[1:] + timestamps})
    eos, start = vocab["<|endoftext|>"], vocab["<|startoftranscript|>"]
    config = WhisperConfig(
        vocab_size=len(vocab),
        num_mel_bins=80,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=1500,
        max_target_positions=64,
        decoder_start_token_id=start,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
        begin_suppress_tokens=[eos],
        suppress_tokens=[],
    )
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=start,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
        no_timestamps_token_id=vocab["<|notimestamps|>"],
        is_multilingual=False,
        max_initial_timestamp_index=50,
        begin_suppress_tokens=[eos],
        suppress_tokens=[],
        max_length=24,
    )
    model.save_pretrained(out)
    WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tokenizer).save_pretrained(
        out
    )


@pytest.fixture(scope="module")
def tiny_whisper_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-whisper")
    build_tiny_random_whisper(out)
    return out


@pytest.fixture
def flexserv_plugins() -> list[object | str]:
    return ["audio", "whisper"]


@pytest.fixture
def flexserv_settings(tiny_whisper_dir: Path) -> dict[str, Any]:
    return {"model": [f"transcription:{NAME}={tiny_whisper_dir}"]}


async def test_random_whisper_serves_every_format(
    flexserv_openai: Any, flexserv_client: Any, flexserv_server: Any
) -> None:
    audio = (DATA / "speech.ogg").read_bytes()
    result = await flexserv_openai.audio.transcriptions.create(
        file=("speech.ogg", audio), model=NAME, response_format="verbose_json"
    )
    assert isinstance(result.text, str)
    assert result.language == "english" and abs(result.duration - 3.73) < 0.1
    assert all(s.end >= s.start >= 0 for s in result.segments)
    model = flexserv_server.registry.model_if_loaded(NAME)
    assert isinstance(model, TransformersWhisperModel)  # chosen by the backend hook, not faster-whisper
    assert model.timestamps and not model.multilingual
    for fmt in ("json", "text", "srt", "vtt"):
        r = await flexserv_client.post(
            "/v1/audio/transcriptions",
            files={"file": ("speech.ogg", audio)},
            data={"model": NAME, "response_format": fmt},
        )
        assert r.status_code == 200, r.text
    assert r.text.startswith("WEBVTT")
    loaded = (await flexserv_client.get("/v1/flexserv/models/loaded")).json()["models"]
    assert [(m["model_id"], m["kind"]) for m in loaded] == [(NAME, "transcription")]


async def test_random_whisper_rejects_other_languages(flexserv_client: Any) -> None:
    r = await flexserv_client.post(
        "/v1/audio/transcriptions",
        files={"file": ("speech.ogg", (DATA / "speech.ogg").read_bytes())},
        data={"model": NAME, "language": "de"},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "language", r.text


async def test_a_directory_that_is_not_whisper_fails_to_load_with_a_clear_error(
    tmp_path: Path, flexserv_server: Any
) -> None:
    from flexserv_whisper.hf import TransformersWhisperBackend
    from flexserv_whisper.settings import WhisperSettings

    from flexserv_core import ModelKind, ModelLoadError, ModelSpec

    spec = ModelSpec(name="broken", kind=ModelKind.TRANSCRIPTION, source=str(tmp_path))
    with pytest.raises(ModelLoadError, match="broken"):
        TransformersWhisperBackend(WhisperSettings()).load(spec, lambda message, fraction: None)
