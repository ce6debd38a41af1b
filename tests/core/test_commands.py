"""Plugin commands (``flexserv_register_commands``): real distributions with an entry
point on ``sys.path``, run through ``flexserv``'s own ``main``."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from flexserv_core import Command, CommandContext
from flexserv_core.cli.main import CORE_HANDLERS, main
from flexserv_core.commands import CORE_COMMANDS
from flexserv_core.testing import write_distribution

_ids = itertools.count()

HELLO = """
from flexserv_core import Command, UsageError, hookimpl

def add_arguments(parser):
    parser.add_argument("--who", default="world")

def run(context):
    if context.args.who == "nobody":
        raise UsageError("--who: say who")
    if context.args.who == "crash":
        raise RuntimeError("the command broke")
    print(f"hello {context.args.who}")
    return 7 if context.args.who == "seven" else None

@hookimpl
def flexserv_register_commands():
    return [Command(name="{name}", help="say hello", add_arguments=add_arguments, run=run)]
"""

WITH_SETTINGS = """
import msgspec
from flexserv_core import Command, UsageError, hookimpl

class Opts(msgspec.Struct, kw_only=True):
    deploy_replicas: int = 1

@hookimpl
def flexserv_add_settings():
    return Opts

@hookimpl
def flexserv_configure(settings):
    if settings.get(Opts).deploy_replicas > 8:
        raise UsageError("deploy_replicas: at most 8")

def run(context):
    s = context.settings
    print(f"{s.get(Opts).deploy_replicas} {s.core.port} {context.args.dry_run} {','.join(context.plugin_args)}")

@hookimpl
def flexserv_register_commands():
    return [Command(name="deploy", help="deploy it", settings=True, run=run,
                    add_arguments=lambda p: p.add_argument("--dry-run", action="store_true"))]
"""


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """Put a real distribution on ``sys.path`` and select it (plus ``also``) alone."""
    selected: list[str] = []

    def add(dist: str, ep_name: str, source: str) -> str:
        module = f"cmdplugin_{next(_ids)}"
        root = write_distribution(tmp_path / module, dist, ep_name, module, textwrap.dedent(source))
        monkeypatch.syspath_prepend(str(root))
        selected.append(ep_name)
        monkeypatch.setenv("FLEXSERV_PLUGINS", ",".join(selected))
        return module

    monkeypatch.delenv("FLEXSERV_CONFIG", raising=False)
    return add


def test_core_commands_have_handlers_and_help() -> None:
    assert set(CORE_HANDLERS) == set(CORE_COMMANDS) == {"run", "plugins"}


@pytest.mark.parametrize("name", ["Bench", "-x", "two words", "a_b", "", "x-"])
def test_command_names_are_checked(name: str) -> None:
    with pytest.raises(ValueError, match="lowercase words joined by dashes"):
        Command(name=name, help="h", run=lambda c: 0)


def test_help_lists_plugin_commands_with_their_plugin(install, capsys: pytest.CaptureFixture[str]) -> None:
    install("flexserv-hello", "hello", HELLO.replace("{name}", "hello"))
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "  run " in out and "  plugins " in out
    line = next(line for line in out.splitlines() if line.startswith("  hello"))
    assert "say hello" in line and "[plugin hello, flexserv-hello]" in line


def test_plugin_command_runs_with_its_arguments_and_exit_status(install, capsys) -> None:
    install("flexserv-hello", "hello", HELLO.replace("{name}", "hello"))
    assert main(["hello", "--who", "you"]) == 0
    assert capsys.readouterr().out == "hello you\n"
    assert main(["hello", "--who", "seven"]) == 7
    assert main(["hello", "--who", "nobody"]) == 2
    assert "flexserv: error: --who: say who" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["hello", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: flexserv hello" in out and "--who" in out and "plugin 'hello' (flexserv-hello)" in out


def test_a_failing_command_names_plugin_and_distribution(install, capsys) -> None:
    install("flexserv-hello", "hello", HELLO.replace("{name}", "hello"))
    assert main(["hello", "--who", "crash"]) == 1
    err = capsys.readouterr().err
    assert "RuntimeError: the command broke" in err  # the traceback
    assert 'Command "hello" of plugin "hello" (distribution flexserv-hello) failed' in err


def test_unknown_command_lists_the_known_ones(install, capsys) -> None:
    install("flexserv-hello", "hello", HELLO.replace("{name}", "hello"))
    assert main(["nosuch"]) == 2
    assert "unknown command 'nosuch'; choose one of run, plugins, hello" in capsys.readouterr().err


def test_unknown_command_mentions_plugins_that_failed(install, capsys) -> None:
    install("flexserv-broken", "broken", "raise ImportError('needs libfoo')\n")
    assert main(["deploy"]) == 2
    err = capsys.readouterr().err
    assert "failed to load" in err and "broken" in err and "needs libfoo" in err


def test_clash_with_a_core_command_names_the_plugin(install, capsys) -> None:
    install("flexserv-hello", "hello", HELLO.replace("{name}", "run"))
    assert main(["--help"]) == 3
    err = capsys.readouterr().err
    assert 'Plugin "hello" (distribution flexserv-hello) failed in flexserv_register_commands' in err
    assert "'run' is a core command" in err


def test_clash_between_two_plugins_names_both(install, capsys) -> None:
    install("flexserv-hello", "hello", HELLO.replace("{name}", "greet"))
    install("flexserv-hi", "hi", HELLO.replace("{name}", "greet"))
    assert main(["greet"]) == 3
    err = capsys.readouterr().err
    # later-registered plugins are called first: "hi" registers greet, then "hello" clashes with it
    assert 'Plugin "hello" (distribution flexserv-hello)' in err
    assert "also registered by plugin 'hi' (distribution flexserv-hi)" in err


def test_returning_something_else_than_commands_names_the_plugin(install, capsys) -> None:
    install(
        "flexserv-odd",
        "odd",
        "from flexserv_core import hookimpl\n\n@hookimpl\ndef flexserv_register_commands():\n    return {'x': print}\n",
    )
    assert main(["x"]) == 3
    err = capsys.readouterr().err
    assert 'Plugin "odd" (distribution flexserv-odd) failed in flexserv_register_commands' in err
    assert "expected Command items" in err


def test_settings_command_gets_resolved_and_configured_settings(install, capsys, monkeypatch, tmp_path) -> None:
    install("flexserv-deploy", "deploy", WITH_SETTINGS)
    config = tmp_path / "flexserv.toml"
    config.write_text("port = 9123\n")
    monkeypatch.setenv("FLEXSERV_DEPLOY_REPLICAS", "3")
    assert main(["deploy", "--config", str(config), "--dry-run", "-p", "no:nothing"]) == 0
    assert capsys.readouterr().out == "3 9123 True no:nothing\n"  # env, config file, own flag, -p values
    assert main(["deploy", "--deploy-replicas", "5"]) == 0
    assert capsys.readouterr().out.startswith("5 ")
    assert main(["deploy", "--deploy-replicas", "9"]) == 2  # flexserv_configure rejected it
    assert "deploy_replicas: at most 8" in capsys.readouterr().err
    assert main(["deploy", "--deploy-replicas", "many"]) == 2
    with pytest.raises(SystemExit):
        main(["deploy", "--help"])
    out = capsys.readouterr().out
    assert "--deploy-replicas" in out and "--port" in out and "--config" in out and "--dry-run" in out


def test_plugins_listing_shows_commands(install, capsys) -> None:
    install("flexserv-hello", "hello", HELLO.replace("{name}", "hello"))
    assert main(["plugins", "--json"]) == 0
    listed = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert listed["hello"]["commands"] == ["hello"]
    assert listed["core"]["commands"] == []


def test_context_is_typed_and_frozen() -> None:
    import argparse

    context = CommandContext(args=argparse.Namespace(), settings=None, plugin_args=())
    with pytest.raises(AttributeError):
        context.settings = None  # type: ignore[misc]


@pytest.mark.slow
def test_help_loads_every_installed_plugin_without_torch() -> None:
    code = (
        "import sys; from flexserv_core.cli.main import main; main(['--help']); "
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "  bench " in out  # the first-party bench plugin, installed by make setup
    assert out.strip().endswith("[]"), out
