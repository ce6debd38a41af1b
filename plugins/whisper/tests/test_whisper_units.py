"""Backend choice, language checks and the embedded default, without running a model."""

from __future__ import annotations

from pathlib import Path

import pytest
from flexserv_whisper.common import check_language, whisper_languages
from flexserv_whisper.faster import FasterWhisperBackend
from flexserv_whisper.hf import TransformersWhisperBackend
from flexserv_whisper.plugin import DEFAULT_MODEL_NAME, embedded_model_path
from flexserv_whisper.settings import WhisperSettings

from flexserv_core import InvalidRequest, ModelKind, ModelSpec
from flexserv_core.testing import make_app


def spec(source: str, backend: str | None = None) -> ModelSpec:
    return ModelSpec(name="m", kind=ModelKind.TRANSCRIPTION, source=source, backend=backend)


def test_embedded_default_is_offered_and_claimed_by_faster_whisper() -> None:
    path = embedded_model_path()
    assert path is not None and (path / "model.bin").is_file()
    server = make_app(["whisper"]).state.flexserv
    default = server.catalog.default(ModelKind.TRANSCRIPTION)
    assert default is not None and default.name == DEFAULT_MODEL_NAME and default.origin == "embedded"
    assert server.registry.backend_for(default).name == "faster-whisper"


def test_backend_choice(tmp_path: Path) -> None:
    settings = WhisperSettings()
    faster, hf = FasterWhisperBackend(settings), TransformersWhisperBackend(settings)
    ct2 = tmp_path / "ct2"
    ct2.mkdir()
    (ct2 / "model.bin").write_bytes(b"")
    assert faster.accepts(spec(str(ct2)))
    assert faster.accepts(spec("Systran/faster-whisper-small"))
    assert faster.accepts(spec("tiny.en"))
    assert not faster.accepts(spec("openai/whisper-tiny"))
    assert hf.accepts(spec("openai/whisper-tiny"))
    # the two recognise disjoint sources, so neither install order nor list order matters
    for source in (str(ct2), "Systran/faster-whisper-small", "tiny.en"):
        assert not hf.accepts(spec(source))
    registry = make_app(["whisper"]).state.flexserv.registry
    assert registry.backend_for(spec(str(ct2), backend="transformers-whisper")).name == "transformers-whisper"
    assert registry.backend_for(spec(str(ct2))).name == "faster-whisper"


def test_language_checks() -> None:
    langs = whisper_languages()
    assert check_language(None, multilingual=False, languages=langs) == "en"
    assert check_language(None, multilingual=True, languages=langs) is None
    assert check_language("EN", multilingual=False, languages=langs) == "en"
    assert check_language("german", multilingual=True, languages=langs) == "de"
    with pytest.raises(InvalidRequest) as info:
        check_language("de", multilingual=False, languages=langs)
    assert info.value.param == "language"
    with pytest.raises(InvalidRequest):
        check_language("xx-nope", multilingual=True, languages=langs)


async def test_embedded_default_answers_to_whisper_1_unless_configuration_takes_it(tmp_path: Path) -> None:
    from flexserv_whisper.plugin import OPENAI_MODEL_NAME

    from flexserv_core.testing import app_client

    server = make_app(["whisper"]).state.flexserv
    assert server.catalog.resolve(OPENAI_MODEL_NAME, ModelKind.TRANSCRIPTION).name == DEFAULT_MODEL_NAME
    app = make_app(["whisper"], settings={"model": [f"transcription:big={tmp_path}"], "model_alias": ["whisper-1=big"]})
    assert app.state.flexserv.catalog.resolve(OPENAI_MODEL_NAME, ModelKind.TRANSCRIPTION).name == "big"
    async with app_client(app) as client:
        listed = [(m["id"], m["root"]) for m in (await client.get("/v1/models")).json()["data"]]
    assert listed.count((OPENAI_MODEL_NAME, "big")) == 1 and (OPENAI_MODEL_NAME, DEFAULT_MODEL_NAME) not in listed
    assert (DEFAULT_MODEL_NAME, DEFAULT_MODEL_NAME) in listed
