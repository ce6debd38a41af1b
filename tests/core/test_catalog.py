"""The model catalog: configured names only, kinds, defaults, --force-model."""

from __future__ import annotations

import pytest

from flexserv_core.errors import InvalidRequest, ModelNotFound, UsageError
from flexserv_core.models.catalog import ModelCatalog, parse_model_option
from flexserv_core.models.spec import ModelKind, ModelSpec
from flexserv_core.settings import CoreSettings
from flexserv_core.testing.app import app_client, make_app
from flexserv_core.testing.fakes import FakeBackendPlugin

EMBEDDED = [
    ModelSpec(name="tiny-chat", kind=ModelKind.TEXT, source="pkg://chat", origin="embedded"),
    ModelSpec(name="tiny-embed", kind=ModelKind.EMBEDDING, source="pkg://embed", origin="embedded"),
]


def catalog(**core: object) -> ModelCatalog:
    return ModelCatalog.from_settings(CoreSettings(**core), EMBEDDED, lambda model_id, kind: None)


@pytest.mark.parametrize(
    ("value", "name", "kind", "source"),
    [
        ("mine=/models/llama", "mine", ModelKind.TEXT, "/models/llama"),
        ("serve:mine=org/repo", "mine", ModelKind.TEXT, "org/repo"),
        ("embedding:bge=BAAI/bge-small-en-v1.5", "bge", ModelKind.EMBEDDING, "BAAI/bge-small-en-v1.5"),
        ("transcription:w=/x/whisper", "w", ModelKind.TRANSCRIPTION, "/x/whisper"),
        ("g=/m/model.gguf", "g", ModelKind.TEXT, "/m/model.gguf"),
        ("text:t=/m/t", "t", ModelKind.TEXT, "/m/t"),
        ("chat:c=/m/c", "c", ModelKind.TEXT, "/m/c"),
        ("asr:a=/m/a", "a", ModelKind.TRANSCRIPTION, "/m/a"),
    ],
)
def test_parse_model_option(value: str, name: str, kind: ModelKind, source: str) -> None:
    spec = parse_model_option(value)
    assert (spec.name, spec.kind, spec.source, spec.origin) == (name, kind, source, "config")


@pytest.mark.parametrize("value", ["noequals", "=src", "name=", "video:x=y"])
def test_bad_model_option(value: str) -> None:
    with pytest.raises(UsageError, match="--model"):
        parse_model_option(value)


def test_embedded_defaults_fill_unconfigured_kinds() -> None:
    c = catalog(model=["mine=/models/llama"], default_model="mine")
    assert c.default(ModelKind.TEXT).name == "mine"
    assert c.default(ModelKind.EMBEDDING).name == "tiny-embed"
    assert c.default(ModelKind.TRANSCRIPTION) is None
    assert c.resolve("tiny-chat", ModelKind.TEXT).source == "pkg://chat"  # still selectable by name


def test_default_model_may_be_a_source() -> None:
    c = catalog(default_model="org/some-model")
    spec = c.resolve("org/some-model", ModelKind.TEXT)
    assert spec.source == "org/some-model" and c.default(ModelKind.TEXT) is spec


def test_force_model_serves_whatever_is_asked() -> None:
    c = catalog(model=["a=/m/a", "b=/m/b"], force_model="b")
    for asked in ("a", "gpt-4o", "../../etc/passwd", None):
        assert c.resolve(asked, ModelKind.TEXT).name == "b"
    assert c.resolve("tiny-embed", ModelKind.EMBEDDING).name == "tiny-embed"


def test_kind_mismatch_is_a_clear_400() -> None:
    with pytest.raises(InvalidRequest) as exc:
        catalog().resolve("tiny-embed", ModelKind.TEXT)
    assert exc.value.param == "model" and exc.value.code == "model_kind_mismatch"
    # what to send instead: the kind this route serves and its default model
    assert exc.value.message == (
        "The model 'tiny-embed' is an embedding model; this endpoint serves text models"
        " (the default is 'tiny-chat'). See GET /v1/models."
    )


def test_hub_ids_need_the_flag() -> None:
    with pytest.raises(ModelNotFound):
        catalog().resolve("HuggingFaceTB/SmolLM2-135M-Instruct", ModelKind.TEXT)


async def test_hub_resolution_through_the_core_plugin() -> None:
    for allowed in (False, True):
        app = make_app([FakeBackendPlugin()], settings={"allow_hub_models": allowed})
        async with app_client(app):
            server = app.state.flexserv
            if allowed:
                assert server.catalog.resolve("org/model-1.5", ModelKind.TEXT).origin == "hub"
            else:
                with pytest.raises(ModelNotFound):
                    server.catalog.resolve("org/model-1.5", ModelKind.TEXT)
            for path_like in ("/abs/path", "../up", "org/../x", ".hidden/x", "a/b/c"):
                with pytest.raises(ModelNotFound):
                    server.catalog.resolve(path_like, ModelKind.TEXT)


def test_plugin_kinds_are_accepted_only_when_declared() -> None:
    assert parse_model_option("rerank:r=/m/r", [*ModelKind, "rerank"]).kind == "rerank"
    with pytest.raises(UsageError, match=r"use one of asr, chat, embedding, serve, text, transcription$"):
        parse_model_option("rerank:r=/m/r")


def test_text_kind_is_text_and_serve_only_on_the_loaded_route() -> None:
    from flexserv_core.models.spec import loaded_wire_kind

    assert ModelKind.TEXT == "text" and loaded_wire_kind(ModelKind.TEXT) == "serve"
    assert loaded_wire_kind("embedding") == "embedding" and loaded_wire_kind("rerank") == "rerank"


def test_model_alias_option_names_configured_and_embedded_models() -> None:
    cat = catalog(model=["mine=/m/mine"], model_alias=["gpt-4o-mini=mine", "small-embed=tiny-embed"])
    assert cat.resolve("gpt-4o-mini", ModelKind.TEXT).name == "mine"
    assert cat.resolve("small-embed", ModelKind.EMBEDDING).name == "tiny-embed"
    assert cat.get("mine") is cat.get("gpt-4o-mini")


def test_configuration_takes_a_name_an_embedded_default_offers() -> None:
    embedded = [ModelSpec(name="w", kind=ModelKind.TRANSCRIPTION, source="pkg://w", aliases=("whisper-1",))]
    core = CoreSettings(model=["transcription:big=/m/big"], model_alias=["whisper-1=big"])
    cat = ModelCatalog.from_settings(core, embedded, lambda model_id, kind: None)
    assert cat.resolve("whisper-1", ModelKind.TRANSCRIPTION).name == "big"
    plain = ModelCatalog.from_settings(CoreSettings(), embedded, lambda model_id, kind: None)
    assert plain.resolve("whisper-1", ModelKind.TRANSCRIPTION).name == "w"


@pytest.mark.parametrize(
    ("aliases", "match"),
    [
        (["nope"], "ALIAS=NAME"),
        (["=mine"], "ALIAS=NAME"),
        (["a=unknown"], "no model is named 'unknown'"),
        (["mine=tiny-chat"], "declared twice"),
        (["a=mine", "a=tiny-chat"], "declared twice"),
    ],
)
def test_bad_model_alias_options(aliases: list[str], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        catalog(model=["mine=/m/mine"], model_alias=aliases)


async def test_alias_option_is_listed_once_under_its_model() -> None:
    app = make_app([FakeBackendPlugin()], settings={"model_alias": ["gpt-4o-mini=fake-model"]})
    async with app_client(app) as client:
        models = (await client.get("/v1/models")).json()["data"]
        assert [(m["id"], m["root"]) for m in models] == [("fake-model", "fake-model"), ("gpt-4o-mini", "fake-model")]
        r = await client.post("/v1/completions", json={"model": "gpt-4o-mini", "prompt": "a", "max_tokens": 2})
        assert r.status_code == 200 and r.json()["model"] == "fake-model"
