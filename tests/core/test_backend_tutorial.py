"""The backend tutorial in docs/plugins.md works as written: its files are extracted,
installed as a real distribution and its tests run in a project of their own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from flexserv_core.testing import write_distribution

pytestmark = pytest.mark.slow  # runs pytest as a process

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
BLOCK = re.compile(r"```(?:python|toml)\n# file: (?P<name>\S+)\n(?P<body>.*?)```", re.DOTALL)


def tutorial_files() -> dict[str, str]:
    files = {m["name"]: m["body"] for m in BLOCK.finditer(DOC.read_text())}
    assert set(files) == {"pyproject.toml", "flexserv_hashvec.py", "test_hashvec.py"}
    return files


def test_tutorial_files_are_lint_free_python(tmp_path: Path) -> None:
    files = tutorial_files()
    for name in ("flexserv_hashvec.py", "test_hashvec.py"):
        (tmp_path / name).write_text(files[name])
    ruff = [sys.executable, "-m", "ruff"]
    for args in (["check", "--select", "E,F,W,I,B,UP", "--line-length", "120"], ["format", "--check"]):
        result = subprocess.run([*ruff, *args, str(tmp_path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def test_tutorial_plugin_and_its_tests_run(tmp_path: Path) -> None:
    files = tutorial_files()
    project = tomllib.loads(files["pyproject.toml"])["project"]
    ((ep_name, module),) = project["entry-points"]["flexserv"].items()
    site = write_distribution(tmp_path / "site", project["name"], ep_name, module, files["flexserv_hashvec.py"])
    work = tmp_path / "project"
    work.mkdir()
    (work / "pytest.ini").write_text("[pytest]\n")  # none of this repository's configuration
    (work / "test_hashvec.py").write_text(files["test_hashvec.py"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "error::DeprecationWarning",
            "-W",
            'ignore:The configuration option "asyncio_default_fixture_loop_scope" is unset',
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "6 passed" in output, output
