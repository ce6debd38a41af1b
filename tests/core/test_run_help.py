"""``flexserv run --help``: defaults, choices, metavars, aliases, and groups titled
by plugin and distribution with the core first (installed plugins, in process)."""

from __future__ import annotations

import re

import pytest

from flexserv_core.cli.main import main


@pytest.fixture(scope="module")
def help_text() -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as info:
        main(["run", "--help"])
    assert info.value.code == 0
    return out.getvalue()


def group_titles(text: str) -> list[str]:
    return re.findall(r"^(\S[^\n]*\(flexserv-[^)]*\)):$", text, flags=re.M)


def test_groups_are_titled_by_plugin_and_distribution_with_the_core_first(help_text: str) -> None:
    titles = group_titles(help_text)
    # the built-in openai plugin has no settings of its own since the embeddings limits left with the route
    assert titles[0].startswith("core (flexserv-core ") and not any(t.startswith("openai ") for t in titles)
    names = [t.split(" ")[0] for t in titles[1:]]
    assert names == sorted(names) and "transformers" in names and "oom-monitor" in names
    assert "transformers (flexserv-transformers " in help_text
    assert "embeddings (flexserv-embeddings " in help_text
    assert "Settings:" not in help_text and "TransformersSettings" not in help_text  # no class names


def test_defaults_choices_and_metavars(help_text: str) -> None:
    flat = " ".join(help_text.split())
    assert "--port PORT TCP port to listen on (0 picks a free one). (default: 8000) [env FLEXSERV_PORT]" in flat
    assert "--log-level {critical,error,warning,info,debug}" in flat
    assert "--model-timeout SECONDS" in flat and "(default: 86400)" in flat
    assert "--cache-dir PATH" in flat and "--model NAME=SOURCE" in flat
    assert "--oom-monitor-eviction {lru,all}" in flat
    assert "--max-embedding-inputs N" in flat
    assert "--allow-hub-models, --no-allow-hub-models" in flat and "(default: off)" in flat
    assert " VALUE" not in flat


def test_transformers_settings_are_prefixed_and_the_spec_spellings_kept(help_text: str) -> None:
    flat = " ".join(help_text.split())
    assert "--transformers-device DEVICE, --device DEVICE" in flat
    assert "--transformers-dtype {auto,float32,bfloat16,float16}, --dtype {auto,float32,bfloat16,float16}" in flat
    assert "[env FLEXSERV_TRANSFORMERS_DEVICE, FLEXSERV_DEVICE]" in flat
    assert "--transformers-engine {simple,paged}" in flat or "--transformers-engine {paged,simple}" in flat
    assert "--transformers-max-batch-size N" in flat
    assert "--transformers-trust-remote-code, --no-transformers-trust-remote-code, --trust-remote-code," in flat
    assert re.search(r"--engine\b", flat) is None and "--max-batch-size" not in flat.replace("-max-batch-size N", "")


def test_an_alias_flag_sets_the_prefixed_setting(tmp_path) -> None:
    """The alias travels through argparse to the canonical setting (no model is loaded)."""
    import argparse

    from flexserv_core.cli.main import settings_groups
    from flexserv_core.plugin_manager import create_plugin_manager
    from flexserv_core.settings import add_arguments, resolve_settings

    pm = create_plugin_manager(env={"FLEXSERV_PLUGINS": "transformers"})
    parser = argparse.ArgumentParser()
    add_arguments(parser, *settings_groups(pm))
    args = vars(parser.parse_args(["--dtype", "float32", "--transformers-device", "cpu", "--no-trust-remote-code"]))
    assert args == {
        "transformers_dtype": "float32",
        "transformers_device": "cpu",
        "transformers_trust_remote_code": False,
    }
    summary = resolve_settings(list(dict.fromkeys(settings_groups(pm)[0])), cli=args, env={}).summary()
    assert (summary["transformers_dtype"], summary["transformers_device"]) == ("float32", "cpu")


def test_a_mistyped_flag_is_one_short_error_suggesting_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    # not the usage of every plugin's setting (hundreds of lines) with the error below it
    with pytest.raises(SystemExit) as info:
        main(["run", "--prot", "18000", "-p", "no:playground"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "flexserv run: error: unrecognized arguments: --prot 18000 (did you mean --port?)",
        "flexserv run --help lists every setting.",
    ]


def test_an_abbreviated_flag_is_refused_not_read_as_the_setting_it_begins(capsys: pytest.CaptureFixture[str]) -> None:
    # accepted, "--model-time 5" would change meaning as soon as a plugin added "--model-time-..."
    with pytest.raises(SystemExit) as info:
        # (the bad port stops an unfixed parser at once, instead of serving)
        main(["run", "--model-time", "5", "--port", "-1", "-p", "no:playground"])
    assert info.value.code == 2
    assert "unrecognized arguments: --model-time 5 (did you mean --model-timeout?)" in capsys.readouterr().err
