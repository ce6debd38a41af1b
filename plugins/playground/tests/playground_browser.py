"""A headless Chromium (the system's, driven by Playwright) and real ``flexserv run``
processes, for the playground's end-to-end tests.

Chromium comes from the system package (``make setup`` installs Debian's
``chromium``); Playwright never downloads a browser here. A missing browser is a
setup error, so the tests fail and say how to fix it rather than skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from flexserv_core.testing import flexserv_cmd, free_port, stop_process, wait_healthy

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser")


def chromium_path() -> str:
    """The system Chromium: $FLEXSERV_TEST_CHROMIUM, else the first on PATH."""
    explicit = os.environ.get("FLEXSERV_TEST_CHROMIUM")
    if explicit:
        if not Path(explicit).is_file():
            pytest.fail(f"FLEXSERV_TEST_CHROMIUM={explicit} is not a file.")
        return explicit
    for name in CHROMIUM_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        "The playground's browser tests need Chromium and none was found on PATH. "
        "`make setup` installs it (Debian: apt-get install -y chromium); elsewhere install "
        "Chromium and set FLEXSERV_TEST_CHROMIUM to its executable."
    )


@contextmanager
def launched_browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("The playground's browser tests need Playwright: pip install -e 'plugins/playground[test]'.")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def flexserv_process(log_path: Path, *args: str, timeout: float = 180) -> Iterator[str]:
    """``flexserv run`` on a free loopback port with the installed plugins; yields its URL.

    Its output goes to ``log_path`` (a pipe nobody reads would fill up and stall
    the server) and is shown if it fails to start. The GGUF conversion cache is
    the user's (or $FLEXSERV_CACHE_DIR): converting the embedded chat model again
    for every run would cost a minute.
    """
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("FLEXSERV_PLUGINS", None)
    base = f"http://127.0.0.1:{port}"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            flexserv_cmd("run", "--host", "127.0.0.1", "--port", str(port), *args),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        try:
            try:
                wait_healthy(base, proc, timeout=timeout)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n--- flexserv output ---\n{log_path.read_text()[-4000:]}") from None
            yield base
        finally:
            stop_process(proc)
