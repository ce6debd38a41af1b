"""Models configured in full: ``[[models]]`` tables in the config file, aliases,
revisions, and kinds that a plugin's backend adds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flexserv_core import (
    Backend,
    LoadedModel,
    ModelKind,
    ModelSpec,
    ProgressCallback,
    UsageError,
    hookimpl,
    resolve_settings,
)
from flexserv_core.app import create_app
from flexserv_core.hooks import settings_structs
from flexserv_core.testing import (
    FAKE_SCRIPT,
    FakeBackendPlugin,
    FakeTextBackend,
    FakeTextModel,
    app_client,
    make_app,
    make_plugin_manager,
    openai_client,
)

CONFIG = """
log_level = "warning"
default_model = "bard"

[[models]]
name = "poet"
source = "fake://poet"
backend = "scripted"
aliases = ["gpt-4o-mini", "bard"]
options = { script = "Roses are red. " }

[[models]]
name = "plain"
kind = "serve"
source = "org/plain-model"
backend = "fake"
revision = "v1.2"
"""


class ScriptedBackend(FakeTextBackend):
    """The fake text backend, but its text comes from the spec's ``options``."""

    name = "scripted"

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        self.loads += 1
        return FakeTextModel(spec, script=spec.options["script"])


class ScriptedPlugin:
    def __init__(self) -> None:
        self.backend = ScriptedBackend()

    @hookimpl
    def flexserv_register_backends(self, settings: Any) -> list[Backend]:
        return [self.backend]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "flexserv.toml"
    path.write_text(text)
    return path


def app_from_config(path: Path, *plugins: object) -> Any:
    pm = make_plugin_manager(plugins)
    settings = resolve_settings(settings_structs(pm), cli={}, env={}, config_file=path)
    return create_app(settings, pm)


async def test_model_tables_are_served_through_the_catalog(tmp_path: Path) -> None:
    scripted = ScriptedPlugin()
    app = app_from_config(write(tmp_path, CONFIG), scripted, FakeBackendPlugin())
    server = app.state.flexserv
    plain = server.catalog.get("plain")
    assert plain is not None and plain.kind == ModelKind.TEXT and plain.revision == "v1.2"
    assert server.catalog.get("bard") is server.catalog.get("poet")
    async with app_client(app) as client:
        listed = {m["id"]: (m["kind"], m["root"]) for m in (await client.get("/v1/models")).json()["data"]}
        assert {k: v for k, v in listed.items() if k != "fake-model"} == {
            "poet": ("text", "poet"),
            "gpt-4o-mini": ("text", "poet"),
            "bard": ("text", "poet"),
            "plain": ("text", "plain"),
        }
        alias = (await client.get("/v1/models/gpt-4o-mini")).json()
        assert (alias["id"], alias["root"]) == ("gpt-4o-mini", "poet")

        openai = openai_client(client)
        texts = {}
        for model in ("bard", "gpt-4o-mini", "poet", "plain"):
            completion = await openai.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=9
            )
            texts[model] = completion.choices[0].message.content
            # as OpenAI answers an alias with the model it resolved to
            assert completion.model == server.catalog.get(model).name
        assert texts["bard"] == texts["gpt-4o-mini"] == texts["poet"] == "Roses are"
        assert texts["plain"] == FAKE_SCRIPT[:9]
        # three names, one model: loaded once and listed once, under the name
        assert scripted.backend.loads == 1
        loaded = (await client.get("/v1/flexserv/models/loaded")).json()["models"]
        assert sorted((m["model_id"], m["kind"]) for m in loaded) == [("plain", "serve"), ("poet", "serve")]
        # a request naming no model gets the default, given by its alias
        r = await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 5})
        assert r.status_code == 200 and r.json()["choices"][0]["text"] == "Roses"


def test_model_tables_merge_with_the_shorthand(tmp_path: Path) -> None:
    path = write(tmp_path, CONFIG)
    pm = make_plugin_manager([ScriptedPlugin(), FakeBackendPlugin()])
    settings = resolve_settings(settings_structs(pm), cli={"model": ["embedding:vec=/m/vec"]}, env={}, config_file=path)
    catalog = create_app(settings, pm).state.flexserv.catalog
    assert {s.name for s in catalog.specs() if s.origin == "config"} == {"poet", "plain", "vec"}
    assert catalog.default(ModelKind.EMBEDDING).name == "vec"


@pytest.mark.parametrize(
    ("cli_model", "message"),
    [
        (
            "poet=/elsewhere",
            r"'poet' is declared twice: by --model poet=/elsewhere and by \[\[models\]\] table models\[0\]",
        ),
        (
            "bard=/elsewhere",
            r"'bard' is declared twice: by --model bard=/elsewhere and by \[\[models\]\] table models\[0\]",
        ),
    ],
)
def test_a_name_declared_twice_stops_start_up(tmp_path: Path, cli_model: str, message: str) -> None:
    pm = make_plugin_manager([ScriptedPlugin(), FakeBackendPlugin()])
    settings = resolve_settings(
        settings_structs(pm), cli={"model": [cli_model]}, env={}, config_file=write(tmp_path, CONFIG)
    )
    with pytest.raises(UsageError, match=message):
        create_app(settings, pm)


def test_two_tables_with_one_name(tmp_path: Path) -> None:
    text = '[[models]]\nname = "a"\nsource = "x"\n[[models]]\nname = "b"\nsource = "y"\naliases = ["a"]\n'
    with pytest.raises(
        UsageError, match=r"'a' is declared twice: by \[\[models\]\] table models\[0\] and by .*models\[1\]"
    ):
        app_from_config(write(tmp_path, text), FakeBackendPlugin())


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('name = "a"\nsource = "x"\nsorce = "y"', r"models\[1\]: unknown key\(s\) 'sorce'"),
        ('name = "a"', r"models\[1\]: Object missing required field `source`"),
        ('name = "a"\nsource = "x"\naliases = "b"', r"models\[1\]: Expected `array`, got `str`"),
        ('name = "a"\nsource = "x"\noptions = 3', r"models\[1\]: Expected `object`, got `int`"),
    ],
)
def test_bad_model_tables_name_the_key_and_table(tmp_path: Path, table: str, message: str) -> None:
    text = f'[[models]]\nname = "ok"\nsource = "s"\n[[models]]\n{table}\n'
    with pytest.raises(UsageError, match=message):
        resolve_settings([], cli={}, env={}, config_file=write(tmp_path, text))


def test_models_must_be_tables(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"array of tables"):
        resolve_settings([], cli={}, env={}, config_file=write(tmp_path, 'models = "a=b"\n'))


def test_unknown_kind_in_a_table(tmp_path: Path) -> None:
    text = '[[models]]\nname = "r"\nsource = "x"\nkind = "rerank"\n'
    with pytest.raises(UsageError, match=r"models\[0\]: unknown kind 'rerank' for model 'r'; use one of .*embedding"):
        app_from_config(write(tmp_path, text))


# --- a kind the core does not know, added by a plugin --------------------------------


class ToyRerankModel(LoadedModel):
    kind = "rerank"

    def unload(self) -> None:
        pass


class ToyRerankBackend(Backend):
    name = "toy-rerank"
    kind = "rerank"

    def accepts(self, spec: ModelSpec) -> bool:
        return spec.source.startswith("/m/")  # so ``--model rerank:NAME=/m/...`` needs no backend name

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        return ToyRerankModel(spec)


class RerankPlugin:
    @hookimpl
    def flexserv_register_backends(self, settings: Any) -> list[Backend]:
        return [ToyRerankBackend()]


async def test_a_plugin_adds_a_kind_without_changing_the_core() -> None:
    app = make_app([RerankPlugin(), FakeBackendPlugin()], settings={"model": ["rerank:ranker=/m/ranker"]})
    server = app.state.flexserv
    async with app_client(app) as client:
        kinds = {m["id"]: m["kind"] for m in (await client.get("/v1/models")).json()["data"]}
        assert kinds == {"ranker": "rerank", "fake-model": "text"}
        async with server.registry.acquire("ranker", ToyRerankModel) as lease:
            assert isinstance(lease.model, ToyRerankModel)
        loaded = (await client.get("/v1/flexserv/models/loaded")).json()["models"]
        assert [(m["model_id"], m["kind"]) for m in loaded] == [("ranker", "rerank")]
        # a rerank model does not serve text endpoints
        r = await client.post("/v1/completions", json={"model": "ranker", "prompt": "x"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "model_kind_mismatch"


def test_without_its_backend_the_kind_is_unknown() -> None:
    with pytest.raises(UsageError, match=r"unknown kind 'rerank' in 'rerank:ranker=/m/ranker'"):
        make_app([FakeBackendPlugin()], settings={"model": ["rerank:ranker=/m/ranker"]})
