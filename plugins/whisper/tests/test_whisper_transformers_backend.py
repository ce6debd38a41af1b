"""The transformers Whisper backend, with a tiny random Whisper built here (offline):
configured with ``--model transcription:NAME=DIR`` and loaded by the same code as
any Hub checkpoint."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from flexserv_whisper.hf import TransformersWhisperModel

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[3] / "tests" / "data"
NAME = "tiny-random-whisper"


def build_tiny_random_whisper(out: Path, *, multilingual: bool = False) -> None:
    """An English-only (or, ``multilingual``, English, German and French) Whisper
    with random weights, a byte-level tokenizer with Whisper's special and timestamp
    tokens, and the standard feature extractor. The multilingual one has alignment
    heads, so transformers can time words."""
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
    languages = ["<|en|>", "<|de|>", "<|fr|>"] if multilingual else ["<|en|>"]
    specials = [
        "<|endoftext|>",
        "<|startoftranscript|>",
        *languages,
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
    extra: dict[str, Any] = {}
    if multilingual:
        extra = {
            "lang_to_id": {token: vocab[token] for token in languages},
            "task_to_id": {"transcribe": vocab["<|transcribe|>"], "translate": vocab["<|translate|>"]},
            "alignment_heads": [[0, 0], [0, 1]],
        }
    model.generation_config = GenerationConfig(
        **extra,
        decoder_start_token_id=start,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
        no_timestamps_token_id=vocab["<|notimestamps|>"],
        is_multilingual=multilingual,
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


MULTI = "tiny-random-whisper-multilingual"


@pytest.fixture(scope="module")
def multilingual_whisper_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-whisper-multilingual")
    build_tiny_random_whisper(out, multilingual=True)
    return out


class PipelineSpy:
    """Delegates to the real pipeline, keeping each call's keyword arguments."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe
        self.calls: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pipe, name)

    def __call__(self, inputs: Any, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return self.pipe(inputs, **kwargs)


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # the SDK marks translations deprecated
async def test_multilingual_whisper_translates_and_english_only_refuses(
    tiny_whisper_dir: Path, multilingual_whisper_dir: Path
) -> None:
    import openai

    from flexserv_core.testing import make_app, openai_client, running_app_client

    app = make_app(
        ["audio", "whisper"],
        settings={
            "model": [f"transcription:{NAME}={tiny_whisper_dir}", f"transcription:{MULTI}={multilingual_whisper_dir}"]
        },
    )
    audio = ("speech.ogg", (DATA / "speech.ogg").read_bytes())
    async with running_app_client(app) as client:
        sdk = openai_client(client)
        with pytest.raises(openai.BadRequestError) as info:
            await sdk.audio.translations.create(file=audio, model=NAME)
        assert info.value.body["code"] == "translation_unsupported" and info.value.body["param"] == "model"
        await sdk.audio.transcriptions.create(file=audio, model=MULTI)  # loads it
        model = app.state.flexserv.registry.model_if_loaded(MULTI)
        assert isinstance(model, TransformersWhisperModel) and model.multilingual and model.can_translate
        spy = PipelineSpy(model._pipe)
        model._pipe = spy
        result = await sdk.audio.translations.create(file=audio, model=MULTI, response_format="verbose_json")
        assert result.task == "translate" and isinstance(result.text, str)
        assert abs(result.duration - 3.73) < 0.1
        assert spy.calls[-1]["generate_kwargs"]["task"] == "translate"
        german = await sdk.audio.transcriptions.create(file=audio, model=MULTI, language="de")
        assert isinstance(german.text, str)
        assert spy.calls[-1]["generate_kwargs"] == {"task": "transcribe", "language": "de"}
        r = await client.post("/v1/audio/translations", files={"file": audio}, data={"model": MULTI, "language": "de"})
        assert r.status_code == 200  # 'language' is not a translation field: dropped like any unknown field


async def test_transformers_word_timestamps_and_stream(multilingual_whisper_dir: Path) -> None:
    from flexserv_core.testing import make_app, openai_client, running_app_client

    app = make_app(["audio", "whisper"], settings={"model": [f"transcription:{MULTI}={multilingual_whisper_dir}"]})
    audio = ("speech.ogg", (DATA / "speech.ogg").read_bytes())
    async with running_app_client(app) as client:
        sdk = openai_client(client)
        result = await sdk.audio.transcriptions.create(
            file=audio, model=MULTI, language="en", response_format="verbose_json", timestamp_granularities=["word"]
        )
        assert result.words is not None and result.segments is None
        assert all(0 <= w.start <= w.end <= result.duration for w in result.words)
        assert all(a.start <= b.start for a, b in itertools.pairwise(result.words))
        plain = await sdk.audio.transcriptions.create(file=audio, model=MULTI, language="en")
        stream = await sdk.audio.transcriptions.create(file=audio, model=MULTI, language="en", stream=True)
        events = [event async for event in stream]
        assert events[-1].type == "transcript.text.done" and events[-1].text == plain.text
        assert "".join(e.delta for e in events[:-1]) == plain.text
