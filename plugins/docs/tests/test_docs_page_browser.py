"""The docs page renders in headless Chromium with every request outside the server blocked."""

from __future__ import annotations

import shutil

import pytest

from flexserv_core.testing import FakeBackendPlugin, ServedApp, make_app

pytestmark = pytest.mark.slow  # starts a browser


def test_docs_page_renders_offline() -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("needs Chromium (make setup installs Debian's 'chromium')")
    outside: list[str] = []
    with (
        ServedApp(make_app([FakeBackendPlugin(), "audio", "docs"], settings={"api_key": ["sk"]})) as base_url,
        sync_playwright() as pw,
    ):
        browser = pw.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = browser.new_page()

            def only_this_server(route, request) -> None:  # type: ignore[no-untyped-def]
                if request.url.startswith(base_url):
                    route.continue_()
                else:
                    outside.append(request.url)
                    route.abort()

            page.route("**/*", only_this_server)
            page.goto(f"{base_url}/docs")
            page.wait_for_selector('[data-path="/v1/chat/completions"]', timeout=30_000)
            assert page.locator(".opblock").count() >= 10
            page.locator('[data-path="/v1/audio/transcriptions"]').first.click()
            page.wait_for_selector('option[value="multipart/form-data"]', state="attached", timeout=10_000)
        finally:
            browser.close()
    assert outside == []
