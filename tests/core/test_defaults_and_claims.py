"""Default models no plugin order can change, and which backend claims a model."""

from __future__ import annotations

import itertools
import logging
import tomllib
from pathlib import Path
from typing import Any

import pytest

from flexserv_core import (
    Backend,
    LoadedModel,
    ModelKind,
    ModelLoadError,
    ModelSpec,
    ProgressCallback,
    UsageError,
    hookimpl,
)
from flexserv_core.app import build_server
from flexserv_core.hooks import settings_structs
from flexserv_core.models.backend_choice import BackendChoice, RegisteredBackend
from flexserv_core.models.defaults import FIRST_PARTY_DISTRIBUTIONS, ModelOffer, pick_defaults
from flexserv_core.settings import resolve_settings
from flexserv_core.testing import FakeBackendPlugin, FakeTextBackend, app_client, make_app, make_plugin_manager
from flexserv_core.testing.app import make_settings

ROOT = Path(__file__).resolve().parents[2]
EMBED = ModelKind.EMBEDDING


def spec(name: str, kind: str = EMBED, *, source: str = "pkg://x", **kw: Any) -> ModelSpec:
    return ModelSpec(name=name, kind=kind, source=source, origin="embedded", **kw)


def offer(name: str, plugin: str, first_party: bool = False, **kw: Any) -> ModelOffer:
    return ModelOffer(spec(name, **kw), plugin, first_party)


# --- the default rule ------------------------------------------------------------------


def test_first_party_offer_beats_third_party_in_every_order() -> None:
    offers = [offer("theirs", "aaa-plugin"), offer("minilm", "sentence-transformers", True)]
    for order in itertools.permutations(offers):
        assert pick_defaults({}, list(order), [])[EMBED] == "minilm"


def test_user_setting_beats_everything_and_configured_beats_third_party() -> None:
    offers = [offer("theirs", "zz"), offer("minilm", "st", True)]
    assert pick_defaults({EMBED: "mine"}, offers, [])[EMBED] == "mine"
    configured = [ModelSpec(name="bge", kind=EMBED, source="BAAI/bge-small-en-v1.5")]
    assert pick_defaults({}, offers[:1], configured)[EMBED] == "bge"
    assert pick_defaults({}, offers, configured)[EMBED] == "minilm"  # first-party still first


def test_third_party_tie_goes_by_plugin_name_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    offers = [offer("from-zeta", "zeta"), offer("from-alpha", "alpha"), offer("from-mid", "mid")]
    for order in itertools.permutations(offers):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert pick_defaults({}, list(order), [])[EMBED] == "from-alpha"
        assert "several plugins offer a default embedding model" in caplog.text
        assert "'from-zeta' (plugin zeta)" in caplog.text and "--default-embedding-model" in caplog.text


def test_a_lone_third_party_offer_is_the_default_without_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert pick_defaults({}, [offer("only", "solo")], [])[EMBED] == "only"
    assert caplog.text == ""


def test_may_be_default_false_is_served_but_never_default() -> None:
    offers = [offer("extra", "aaa", may_be_default=False), offer("main", "zzz")]
    assert pick_defaults({}, offers, [])[EMBED] == "main"
    assert EMBED not in pick_defaults({}, offers[:1], [])

    class Offers:
        @hookimpl
        def flexserv_default_models(self, settings: Any) -> list[ModelSpec]:
            return [spec("side-model", ModelKind.TEXT, source="fake://", backend="fake", may_be_default=False)]

    server = make_app([Offers(), FakeBackendPlugin()]).state.flexserv
    assert server.catalog.default(ModelKind.TEXT).name == "fake-model"
    assert server.catalog.resolve("side-model", ModelKind.TEXT).name == "side-model"


def test_first_party_distributions_are_this_projects_plugins() -> None:
    """A new plugins/*/ distribution must be listed, or its defaults would rank as third-party."""
    names = {tomllib.loads(p.read_text())["project"]["name"] for p in ROOT.glob("plugins/*/pyproject.toml")}
    assert names <= FIRST_PARTY_DISTRIBUTIONS
    contrib = {tomllib.loads(p.read_text())["project"]["name"] for p in ROOT.glob("contrib/*/pyproject.toml")}
    assert not contrib & FIRST_PARTY_DISTRIBUTIONS  # examples are written like third-party plugins


# --- which backend claims a model --------------------------------------------------------


class QuietBackend(Backend):
    """Keeps the base class's accepts(): loads only specs that name it."""

    name = "quiet"
    kind = ModelKind.TEXT

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        raise AssertionError("not loaded in these tests")


class GreedyBackend(QuietBackend):
    name = "greedy"

    def accepts(self, spec: ModelSpec) -> bool:
        return spec.source.startswith("fake://")


class Registers:
    def __init__(self, *backends: Backend) -> None:
        self.backends = list(backends)

    @hookimpl
    def flexserv_register_backends(self, settings: Any) -> list[Backend]:
        return self.backends


def test_the_default_accepts_claims_nothing_of_its_kind() -> None:
    choice = BackendChoice([QuietBackend(), FakeTextBackend()])
    assert choice.choose(spec("m", ModelKind.TEXT, source="fake://")).name == "fake"
    assert choice.choose(spec("m", ModelKind.TEXT, source="fake://", backend="quiet")).name == "quiet"
    with pytest.raises(ModelLoadError, match="recognises the source '/models/x'"):
        choice.choose(spec("m", ModelKind.TEXT, source="/models/x"))


def test_two_claimants_of_a_configured_model_stop_start_up_naming_both(tmp_path: Path) -> None:
    pm = make_plugin_manager([Registers(GreedyBackend()), FakeBackendPlugin()])
    with pytest.raises(UsageError) as info:
        build_server(make_settings(pm, {"model": ["dup=fake://weights"]}), pm)
    message = str(info.value)
    assert "model 'dup'" in message and "backend 'greedy' (plugin Registers-" in message
    assert "backend 'fake' (plugin FakeBackendPlugin-" in message and 'backend = "fake"' in message
    # naming the backend settles it
    config = tmp_path / "flexserv.toml"
    config.write_text('[[models]]\nname = "dup"\nsource = "fake://weights"\nbackend = "fake"\n')
    settings = resolve_settings(settings_structs(pm), cli={}, env={}, config_file=config)
    assert build_server(settings, pm).registry.backend_for(settings.models[0]).name == "fake"


class SpecialistBackend(GreedyBackend):
    """Recognises what GreedyBackend does, and ranks ``fake://special/`` sources higher."""

    name = "specialist"

    def preference(self, spec: ModelSpec) -> int:
        return 5 if spec.source.startswith("fake://special/") else 0


def test_the_backend_that_prefers_a_source_loads_it_and_a_tie_stays_ambiguous() -> None:
    choice = BackendChoice([GreedyBackend(), SpecialistBackend()])
    assert choice.choose(spec("m", ModelKind.TEXT, source="fake://special/x")).name == "specialist"
    choice.check([spec("m", ModelKind.TEXT, source="fake://special/x")])  # no start-up error either
    with pytest.raises(ModelLoadError) as info:
        choice.choose(spec("m", ModelKind.TEXT, source="fake://plain"))
    assert info.value.code == "ambiguous_backend"
    # a named backend still wins over any preference
    assert choice.choose(spec("m", ModelKind.TEXT, source="fake://special/x", backend="greedy")).name == "greedy"


def test_two_backends_with_one_name_stop_start_up() -> None:
    with pytest.raises(UsageError, match="two backends are named 'fake'"):
        BackendChoice([RegisteredBackend(FakeTextBackend(), "a"), RegisteredBackend(FakeTextBackend(), "b")])


async def test_a_model_resolved_at_request_time_with_two_claimants_is_an_openai_error() -> None:
    class Resolves:
        @hookimpl
        def flexserv_resolve_model(self, model_id: str, kind: str, server: Any) -> ModelSpec | None:
            return ModelSpec(name=model_id, kind=kind, source=f"fake://{model_id}", origin="hub")

    app = make_app([Resolves(), Registers(GreedyBackend()), FakeBackendPlugin()])
    async with app_client(app) as client:
        r = await client.post("/v1/completions", json={"model": "org/late", "prompt": "hi", "max_tokens": 2})
        assert r.status_code == 503
        error = r.json()["error"]
        assert error["code"] == "ambiguous_backend" and error["param"] == "model"
        assert "backend 'greedy'" in error["message"] and "backend 'fake'" in error["message"]
        # the offered model, which names its backend, is unaffected
        r = await client.post("/v1/completions", json={"model": "fake-model", "prompt": "hi", "max_tokens": 2})
        assert r.status_code == 200


def test_default_settings_resolve_the_embedded_models_by_their_own_names() -> None:
    """The names /v1/models lists for the embedded models select them as defaults,
    as --force-model does, instead of being taken for Hub ids."""
    plugins: list[object | str] = ["transformers", "sentence-transformers"]
    embedded = make_app(plugins).state.flexserv.catalog
    text, embedding = embedded.default(ModelKind.TEXT), embedded.default(ModelKind.EMBEDDING)
    assert text is not None and embedding is not None
    chosen = make_app(
        plugins, settings={"default_model": text.name, "default_embedding_model": embedding.name}
    ).state.flexserv.catalog
    assert chosen.default(ModelKind.TEXT) == text
    assert chosen.default(ModelKind.EMBEDDING) == embedding
    forced = make_app(plugins, settings={"force_model": text.name}).state.flexserv.catalog
    assert forced.default(ModelKind.TEXT) == text
    with pytest.raises(UsageError, match=r"--default-embedding-model .* is a text model"):
        make_app(plugins, settings={"default_embedding_model": text.name})
