"""``flexserv plugins new``: the written plugin installs, passes its own tests and is
listed by ``flexserv plugins``.

It is installed with ``pip install --target`` into the test's temporary directory
(a real wheel build and install, with dist-info and entry point) and made visible
to the subprocesses through ``PYTHONPATH``: nothing is added to the running
environment, so there is nothing to uninstall.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flexserv_core.cli.main import main
from flexserv_core.scaffold import plugin_files


def test_files_use_the_prefix_everywhere() -> None:
    files = plugin_files("my-redact")
    assert sorted(files) == [
        "README.md",
        "flexserv_my_redact/__init__.py",
        "flexserv_my_redact/plugin.py",
        "pyproject.toml",
        "tests/test_my_redact.py",
    ]
    assert 'name = "flexserv-my-redact"' in files["pyproject.toml"]
    assert 'my-redact = "flexserv_my_redact.plugin"' in files["pyproject.toml"]
    plugin = files["flexserv_my_redact/plugin.py"]
    assert "my_redact_greeting:" in plugin and "class MyRedactSettings" in plugin
    assert '@get("/v1/my-redact/stats"' in plugin and "def flexserv_preprocess_request" in plugin
    assert "--my-redact-greeting" in files["README.md"] and "FLEXSERV_MY_REDACT_GREETING" in files["README.md"]
    assert plugin_files("flexserv-my-redact") == files  # the distribution prefix is not doubled
    # as docs/plugins.md says: the kit's extra, no asyncio configuration, the entry point loaded by name
    assert 'test = ["flexserv-core[testing]>=' in files["pyproject.toml"]
    assert "asyncio" not in files["pyproject.toml"]
    test = files["tests/test_my_redact.py"]
    assert 'return ["my-redact", FakeBackendPlugin()]' in test and "import plugin" not in test


def test_bad_name_and_existing_directory_are_usage_errors(tmp_path: Path, capsys) -> None:
    assert main(["plugins", "new", "Bad Name", "--dir", str(tmp_path)]) == 2
    assert "plugin name 'Bad Name'" in capsys.readouterr().err
    assert main(["plugins", "new", "ok", "--dir", str(tmp_path)]) == 0
    assert main(["plugins", "new", "ok", "--dir", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_generated_code_is_ruff_clean_under_its_own_config(tmp_path: Path) -> None:
    assert main(["plugins", "new", "tidy", "--dir", str(tmp_path)]) == 0
    for args in (["check", "--no-cache"], ["format", "--check", "--no-cache"]):
        proc = subprocess.run(
            [sys.executable, "-m", "ruff", *args, str(tmp_path / "tidy")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_new_plugin_installs_passes_its_tests_and_is_listed(tmp_path: Path) -> None:
    assert main(["plugins", "new", "hello-kit", "--dir", str(tmp_path)]) == 0
    root, site = tmp_path / "hello-kit", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip, "--target", str(site), str(root)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert (site / "flexserv_hello_kit-0.1.0.dist-info").is_dir()
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("FLEXSERV_PLUGINS", None)
    # Its own pyproject is the pytest config (rootdir): nothing of this repository's configuration applies.
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "2 passed" in tests.stdout
    assert f"rootdir: {root}" in tests.stdout and "configfile: pyproject.toml" in tests.stdout
    listing = subprocess.run(
        [sys.executable, "-m", "flexserv_core", "plugins", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    plugin = {p["name"]: p for p in json.loads(listing.stdout)}["hello-kit"]
    assert (plugin["status"], plugin["distribution"], plugin["version"]) == ("loaded", "flexserv-hello-kit", "0.1.0")
    assert plugin["hooks"] == ["flexserv_add_settings", "flexserv_preprocess_request", "flexserv_register_routes"]
    assert plugin["routes"] == ["GET /v1/hello-kit/stats"]
