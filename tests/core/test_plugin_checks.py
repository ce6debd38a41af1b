"""Start-up checks on plugins, with real (throwaway) distributions found through
their entry points in this process: hook-like functions that could never be
called, wrong return types of collect hooks, settings clashes, and ``-p``
selection. Each error names the plugin and its distribution."""

from __future__ import annotations

import logging
import sys
import tomllib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from flexserv_core import hooks
from flexserv_core.app import create_app
from flexserv_core.errors import PluginHookError, PluginLoadError, PluginNotInstalled, UsageError
from flexserv_core.hookspecs import hookimpl
from flexserv_core.plugin_manager import PluginStatus, create_plugin_manager
from flexserv_core.settings import resolve_settings
from flexserv_core.testing.app import make_settings
from flexserv_core.testing.process import write_distribution

HEADER = "import msgspec\nimport pluggy\nfrom typing import Annotated\nfrom flexserv_core import hookimpl\n\n"
Install = Callable[..., str]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """Put a distribution with one ``flexserv`` entry point on ``sys.path``; return
    its module's name (unique, so no test sees another's module)."""
    modules: list[str] = []

    def make(ep_name: str, source: str, dist: str | None = None) -> str:
        module = f"fs_{ep_name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        dist = dist or f"flexserv-{ep_name}"
        root = write_distribution(tmp_path / module, dist, ep_name, module, HEADER + source)
        monkeypatch.syspath_prepend(str(root))
        modules.append(module)
        return module

    yield make
    for module in modules:
        sys.modules.pop(module, None)


def only(*names: str) -> dict[str, str]:
    return {"FLEXSERV_PLUGINS": ",".join(names)}


# --- hook-like functions that could never be called -----------------------------------

NEVER_CALLED = {
    "no marker": (
        "def flexserv_health(server):\n    return {'x': 1}\n",
        "flexserv_health has no @hookimpl marker, so it would never be called",
    ),
    "marked without the prefix": (
        "@hookimpl\ndef health(server):\n    return {'x': 1}\n",
        "health is marked @hookimpl but 'health' is not a FlexServ hook, so it would never be called",
    ),
    "another project's marker": (
        "other = pluggy.HookimplMarker('flexserve')\n\n@other\ndef flexserv_health(server):\n    return {}\n",
        "flexserv_health is marked with a hookimpl marker of project 'flexserve', not 'flexserv'",
    ),
    "async def of a sync hook": (
        "@hookimpl\nasync def flexserv_health(server):\n    return {'x': 1}\n",
        "flexserv_health is 'async def', but FlexServ calls it synchronously",
    ),
    "unknown flexserv_ hook": (
        "@hookimpl\ndef flexserv_helth(server):\n    return {}\n",
        "unknown hook 'flexserv_helth'",
    ),
}


@pytest.mark.parametrize("case", NEVER_CALLED)
def test_a_hook_that_could_never_be_called_stops_start_up(install: Install, case: str) -> None:
    source, message = NEVER_CALLED[case]
    install("sloppy", source)
    with pytest.raises(PluginLoadError) as info:
        create_plugin_manager(env=only("sloppy"))
    text = str(info.value)
    assert 'Error loading plugin "sloppy" (distribution flexserv-sloppy)' in text
    assert message in text
    assert "-p no:sloppy" in text
    listed = create_plugin_manager(env=only("sloppy"), strict=False).infos["sloppy"]
    assert listed.status is PluginStatus.FAILED and message in (listed.error or "")


def test_a_plugin_may_also_implement_another_projects_hooks(install: Install) -> None:
    source = (
        "pytest_impl = pluggy.HookimplMarker('pytest')\n\n"
        "@pytest_impl\ndef pytest_configure(config):\n    pass\n\n"
        "@hookimpl\ndef flexserv_health(server):\n    return {'both': True}\n"
    )
    install("both", source)
    pm = create_plugin_manager(env=only("both"))
    assert pm.infos["both"].hooks == ["flexserv_health"]


# --- wrong return types of collect hooks -----------------------------------------------

WRONG_RETURNS = {
    "flexserv_register_routes": (
        "from litestar import get\n\n@get('/x')\nasync def x() -> str:\n    return 'x'\n\n"
        "@hookimpl\ndef flexserv_register_routes(settings):\n    return x\n",
        "returned <",
        "expected a list",
    ),
    "flexserv_register_backends": (
        "@hookimpl\ndef flexserv_register_backends(settings):\n    return [object()]\n",
        "returned <object object",
        "expected Backend items",
    ),
    "flexserv_default_models": (
        "@hookimpl\ndef flexserv_default_models(settings):\n    return ['text:m=/m']\n",
        "returned 'text:m=/m'",
        "expected ModelSpec items",
    ),
}


@pytest.mark.parametrize("hook", WRONG_RETURNS)
def test_a_collect_hook_returning_the_wrong_type_names_plugin_and_distribution(install: Install, hook: str) -> None:
    source, returned, expected = WRONG_RETURNS[hook]
    install("wrong", source)
    pm = create_plugin_manager(env=only("wrong"))
    with pytest.raises(PluginHookError) as info:
        create_app(make_settings(pm), pm)
    text = str(info.value)
    assert f'Plugin "wrong" (distribution flexserv-wrong) failed in {hook}: {returned}' in text
    assert expected in text


def test_add_settings_returning_a_non_struct_names_plugin_and_distribution(install: Install) -> None:
    install("wrong", "@hookimpl\ndef flexserv_add_settings():\n    return {'wrong_x': 1}\n")
    pm = create_plugin_manager(env=only("wrong"))
    with pytest.raises(PluginHookError, match=r"distribution flexserv-wrong\) failed in flexserv_add_settings: "):
        hooks.settings_structs(pm)


# --- settings that clash ---------------------------------------------------------------


def settings_source(struct: str, field: str, extra: str = "") -> str:
    return (
        f"class {struct}(msgspec.Struct, kw_only=True):\n"
        f"    {field}: Annotated[int, msgspec.Meta(description='x'{extra})] = 1\n\n"
        f"@hookimpl\ndef flexserv_add_settings():\n    return {struct}\n"
    )


def test_a_setting_named_like_a_core_setting_names_the_plugin(install: Install) -> None:
    install("porty", settings_source("PortySettings", "port"))
    pm = create_plugin_manager(env=only("porty"))
    with pytest.raises(PluginLoadError) as info:
        hooks.settings_structs(pm)
    text = str(info.value)
    assert 'plugin "porty" (distribution flexserv-porty)' in text
    assert "setting 'port' clashes with the core's setting" in text
    assert "porty_port" in text  # the suggested prefixed name


def test_an_alias_clashing_with_a_core_setting_is_an_error_too(install: Install) -> None:
    install("aliased", settings_source("AliasedSettings", "aliased_host", ", extra={'aliases': ['host']}"))
    with pytest.raises(PluginLoadError, match=r"setting 'host' \(alias of 'aliased_host'\) clashes with the core's"):
        hooks.settings_structs(create_plugin_manager(env=only("aliased")))


def test_two_plugins_declaring_one_setting_names_both(install: Install) -> None:
    install("alpha", settings_source("AlphaSettings", "shared_limit"))
    install("beta", settings_source("BetaSettings", "shared_limit"))
    pm = create_plugin_manager(env=only("alpha", "beta"))
    with pytest.raises(PluginLoadError) as info:
        hooks.settings_structs(pm)
    text = str(info.value)
    # beta registered last runs first: alpha, met second, is the one refused
    assert 'plugin "alpha" (distribution flexserv-alpha)' in text
    assert 'clashes with plugin "beta"\'s (distribution flexserv-beta) setting' in text


# --- selection -------------------------------------------------------------------------


def test_dotted_module_of_an_installed_plugin_registers_it_once(install: Install) -> None:
    module = install("dotted", "@hookimpl\ndef flexserv_health(server):\n    return {'dotted': True}\n")
    pm = create_plugin_manager([module], env=only("dotted"))
    assert [name for name in pm.loaded_names() if name in ("dotted", module)] == ["dotted"]
    assert pm.infos["dotted"].distribution == "flexserv-dotted"
    # autoload off: -p with the module alone loads the plugin under its entry-point name
    pm = create_plugin_manager([module], env={"FLEXSERV_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert "dotted" in pm.infos and module not in pm.infos
    # and blocking by module blocks the plugin
    pm = create_plugin_manager([f"no:{module}"], env=only("dotted"))
    assert pm.infos["dotted"].status is PluginStatus.BLOCKED


def test_unknown_plugin_name_says_it_is_not_installed_and_lists_what_is(install: Install) -> None:
    install("present", "@hookimpl\ndef flexserv_health(server):\n    return {}\n")
    with pytest.raises(PluginNotInstalled) as info:
        create_plugin_manager(["nosuchplugin"], env={"FLEXSERV_DISABLE_PLUGIN_AUTOLOAD": "1"})
    text = str(info.value)
    assert "plugin 'nosuchplugin' is not installed" in text
    assert "present" in text.split("Installed plugins:")[1]
    assert "built in: core, openai" in text
    assert "not from an installed distribution" not in text and "no:nosuchplugin" not in text


def test_blocking_a_plugin_that_does_not_exist_warns_naming_it(
    install: Install, caplog: pytest.LogCaptureFixture
) -> None:
    # a typo in -p no:NAME would otherwise leave the plugin it meant loaded, silently
    install("present", "@hookimpl\ndef flexserv_health(server):\n    return {}\n")
    with caplog.at_level(logging.WARNING, logger="flexserv_core.plugin_manager"):
        pm = create_plugin_manager(
            ["no:presnet", "no:present", "no:playground"], env={"FLEXSERV_DISABLE_PLUGIN_AUTOLOAD": "1"}
        )
    assert pm.infos["present"].status is PluginStatus.BLOCKED
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "-p no:presnet" in warnings[0] and "present" in warnings[0].split("installed:")[1]


def test_a_dotted_module_that_raises_on_import_is_a_load_error_not_missing(install: Install) -> None:
    module = install("raises", "import not_a_module_anywhere_xyz\n")
    with pytest.raises(PluginLoadError, match="No module named 'not_a_module_anywhere_xyz'"):
        create_plugin_manager([module], env={"FLEXSERV_PLUGINS": ""})


def test_blocked_plugins_settings_in_config_and_env_are_ignored_with_one_warning(
    install: Install, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    install("blocky", settings_source("BlockySettings", "blocky_limit"))
    pm = create_plugin_manager(["no:blocky"], env=only("blocky"))
    assert pm.infos["blocky"].status is PluginStatus.BLOCKED
    config = tmp_path / "flexserv.toml"
    config.write_text("port = 7100\nblocky_limit = 5\n")
    env = {"FLEXSERV_BLOCKY_LIMIT": "6", "FLEXSERV_HOST": "127.0.0.2"}
    with caplog.at_level(logging.WARNING, logger="flexserv_core.settings"):
        settings = resolve_settings(hooks.settings_structs(pm), cli={}, env=env, config_file=config, blocked=["blocky"])
    assert (settings.core.port, settings.core.host) == (7100, "127.0.0.2")
    assert settings.ignored == [("blocky_limit", "config file"), ("FLEXSERV_BLOCKY_LIMIT", "environment")]
    warnings = [
        r.getMessage() for r in caplog.records if r.name == "flexserv_core.settings" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 1
    assert "blocky" in warnings[0] and "blocky_limit (config file)" in warnings[0]
    # a key that belongs to no blocked plugin is still refused
    config.write_text("blocky_limit = 5\nbloky_typo = 1\n")
    with pytest.raises(UsageError, match=r"unknown setting\(s\) in config file .*: bloky_typo"):
        resolve_settings(hooks.settings_structs(pm), cli={}, env={}, config_file=config, blocked=["blocky"])


# --- hooks a plugin owns (entry-point group flexserv.hookspecs) -------------------------------


def _hookspec_distribution(root: Path, module: str, source: str) -> None:
    info = root / "flexserv_owner_example-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flexserv-owner-example\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[flexserv.hookspecs]\nowner-example = {module}\n")
    (root / f"{module}.py").write_text(source)


OWNED_SPEC = (
    "from flexserv_core import hookspec\n\n@hookspec\ndef flexserv_owned_example(settings):\n    'Called never.'\n"
)


def test_a_plugin_owned_hookspec_is_known_to_every_manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = f"owner_example_{uuid.uuid4().hex[:8]}"
    _hookspec_distribution(tmp_path, module, OWNED_SPEC)
    monkeypatch.syspath_prepend(str(tmp_path))
    pm = create_plugin_manager([], env={"FLEXSERV_PLUGINS": ""})
    assert pm.hook.flexserv_owned_example.has_spec()
    implementer = type("Impl", (), {"flexserv_owned_example": hookimpl(lambda self, settings: 1)})()
    pm.register_plugin(implementer, "implementer")  # known hook: registers, whatever the load order
    assert [r.value for r in hooks.call_hook(pm, "flexserv_owned_example", {"settings": None})] == [1]


def test_a_broken_hookspec_module_names_its_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = f"owner_example_{uuid.uuid4().hex[:8]}"
    _hookspec_distribution(tmp_path, module, "raise RuntimeError('kaboom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginLoadError, match=r"flexserv-owner-example.*kaboom"):
        create_plugin_manager([], env={"FLEXSERV_PLUGINS": ""})


# --- FLEXSERV_PLUGINS and the first-party plugins that carry the OpenAI surface ----------------


def test_a_plugin_list_that_leaves_out_platform_plugins_says_which(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="flexserv_core.plugin_manager"):
        create_plugin_manager(["no:state"], env={"FLEXSERV_PLUGINS": "resources,constraints"})
    [warning] = [r.getMessage() for r in caplog.records if r.name == "flexserv_core.plugin_manager"]
    assert "embeddings (POST /v1/embeddings)" in warning and "responses (the Responses API)" in warning
    assert "tool-parsers (tool calling" in warning
    assert "constraints" not in warning  # listed
    assert "state (" not in warning  # blocked: the user said so
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="flexserv_core.plugin_manager"):
        create_plugin_manager([], env={"FLEXSERV_PLUGINS": ""})  # "none" is a deliberate choice
        create_plugin_manager([], env={})  # autoload: everything installed is loaded
    assert not [r for r in caplog.records if r.name == "flexserv_core.plugin_manager"]


# --- names that left the core ------------------------------------------------------------


def test_a_plugin_importing_a_name_that_left_the_core_is_told_where_it_went(install: Install) -> None:
    install("old-parser", "from flexserv_core import ToolParser\n")
    with pytest.raises(PluginLoadError) as info:
        create_plugin_manager(env=only("old-parser"))
    text = str(info.value)
    assert 'Error loading plugin "old-parser" (distribution flexserv-old-parser)' in text
    assert "cannot import name 'ToolParser' from 'flexserv_core'" in text
    assert "import it from flexserv_tool_parsers and depend on flexserv-tool-parsers" in text
    install("other-import", "from flexserv_core import NoSuchName\n")
    with pytest.raises(PluginLoadError) as other:
        create_plugin_manager(env=only("other-import"))
    assert "moved out of the core" not in str(other.value)  # only names that moved get a hint


def test_each_moved_name_is_public_where_the_hint_sends_it() -> None:
    """The table behind the hint, against each library's ``__all__`` (read from its
    source) and the core's: a name listed as moved is no longer the core's."""
    import ast

    import flexserv_core
    from flexserv_core.moved_names import MOVED

    root = Path(__file__).resolve().parents[2]
    exported: dict[str, set[str]] = {}
    distribution: dict[str, str] = {}
    for init in root.glob("plugins/*/flexserv_*/__init__.py"):
        distribution[init.parent.name] = tomllib.loads((init.parents[1] / "pyproject.toml").read_text())["project"][
            "name"
        ]
        for node in ast.parse(init.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                exported[init.parent.name] = set(ast.literal_eval(node.value))
    wrong = {
        name: (module, dist)
        for name, (module, dist) in MOVED.items()
        if name not in exported.get(module, set()) or distribution.get(module) != dist
    }
    assert wrong == {}, "listed as moved to a library that does not export it, or under another distribution"
    assert not set(MOVED) & set(flexserv_core.__all__)
