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
#: The embedding tutorial's files and the text-backend tutorial's, by their marker.
TUTORIALS = {
    "file": ("flexserv_hashvec.py", "test_hashvec.py", "6 passed"),
    "text-backend file": ("flexserv_echo.py", "test_echo.py", "4 passed"),
}


def tutorial_files(marker: str = "file") -> dict[str, str]:
    block = re.compile(rf"```(?:python|toml)\n# {marker}: (?P<name>\S+)\n(?P<body>.*?)```", re.DOTALL)
    files = {m["name"]: m["body"] for m in block.finditer(DOC.read_text())}
    module, test, _ = TUTORIALS[marker]
    assert set(files) == {"pyproject.toml", module, test}
    return files


@pytest.mark.parametrize("marker", TUTORIALS)
def test_tutorial_files_are_lint_free_python(tmp_path: Path, marker: str) -> None:
    files = tutorial_files(marker)
    for name in TUTORIALS[marker][:2]:
        (tmp_path / name).write_text(files[name])
    ruff = [sys.executable, "-m", "ruff"]
    for args in (["check", "--select", "E,F,W,I,B,UP", "--line-length", "120"], ["format", "--check"]):
        result = subprocess.run([*ruff, *args, str(tmp_path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("marker", TUTORIALS)
def test_tutorial_plugin_and_its_tests_run(tmp_path: Path, marker: str) -> None:
    files = tutorial_files(marker)
    module_file, test_file, passed = TUTORIALS[marker]
    project = tomllib.loads(files["pyproject.toml"])["project"]
    ((ep_name, module),) = project["entry-points"]["flexserv"].items()
    site = write_distribution(tmp_path / "site", project["name"], ep_name, module, files[module_file])
    work = tmp_path / "project"
    work.mkdir()
    (work / "pytest.ini").write_text("[pytest]\n")  # none of this repository's configuration
    (work / test_file).write_text(files[test_file])
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
    assert passed in output, output
