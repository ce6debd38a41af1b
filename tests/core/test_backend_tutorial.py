"""The backend tutorials in docs/plugins.md work as written: their files are extracted
into a folder as the page lays them out, built and installed by pip as a real
distribution, and their tests run in a project of their own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs pytest as a process

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
#: The embedding tutorial's files and the text-backend tutorial's, by their marker.
TUTORIALS = {
    "file": ("flexserv_hashvec.py", "tests/test_hashvec.py", "6 passed"),
    "text-backend file": ("flexserv_echo.py", "tests/test_echo.py", "4 passed"),
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
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(files[name])
    ruff = [sys.executable, "-m", "ruff"]
    for args in (["check", "--select", "E,F,W,I,B,UP", "--line-length", "120"], ["format", "--check"]):
        result = subprocess.run([*ruff, *args, str(tmp_path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("marker", TUTORIALS)
def test_tutorial_plugin_and_its_tests_run(tmp_path: Path, marker: str) -> None:
    """The files laid out as the page names them, built into a wheel and installed by
    pip (offline, no build isolation: this environment's setuptools), then the
    tutorial's tests run in that folder against the installed distribution."""
    files = tutorial_files(marker)
    _, _, passed = TUTORIALS[marker]
    work = tmp_path / "project"
    for name, body in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(body)
    (work / "pytest.ini").write_text("[pytest]\n")  # none of this repository's configuration
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    offline = ["--no-deps", "--no-index", "--no-build-isolation"]
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    built = subprocess.run(
        [*pip, "wheel", *offline, "--wheel-dir", str(wheels), str(work)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheels.glob("*.whl")
    installed = subprocess.run(
        [*pip, "install", *offline, "--target", str(site), str(wheel)], capture_output=True, text=True
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
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
            "tests",
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
