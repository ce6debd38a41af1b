"""The Documents tab in a real headless Chromium against a real ``flexserv run``:
upload, recognised lines drawn over the page, an extraction with a schema."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from flexserv_ocr.testing import INVOICE_LINES, png_bytes, render_lines
from playground_browser import flexserv_process, launched_browser

pytestmark = pytest.mark.slow
MODEL_TIMEOUT_MS = 240_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("flexserv") / "flexserv.log"
    with flexserv_process(log, "--state-url", "memory://") as base:
        yield base


def test_upload_read_and_extract(server: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    scan = tmp_path_factory.mktemp("docs") / "invoice.png"
    scan.write_bytes(png_bytes(render_lines(INVOICE_LINES, size=30)))
    with launched_browser() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            page.goto(f"{server}/playground#documents")
            page.wait_for_selector('#doc-ocr-model option[value="rapidocr"]', state="attached")
            page.set_input_files("#doc-file", str(scan))
            page.click("#doc-run")
            page.wait_for_function(
                "() => document.getElementById('doc-status').textContent.startsWith('Read')", timeout=MODEL_TIMEOUT_MS
            )
            boxes = page.locator("#doc-pages-view svg rect.line-box")
            assert boxes.count() == len(INVOICE_LINES)
            # the boxes lie on the page, top to bottom, over the uploaded image
            ys = [float(boxes.nth(i).get_attribute("y") or "nan") for i in range(boxes.count())]
            assert ys == sorted(ys) and ys[0] >= 0
            assert page.locator("#doc-pages-view svg image").count() == 1
            assert "42.50" in page.inner_text("#doc-lines") and "INV-0042" in page.inner_text("#doc-lines")

            page.click("#doc-extract")
            page.wait_for_function(
                "() => /^(Done|Error)/.test(document.getElementById('doc-extract-status').textContent)",
                timeout=MODEL_TIMEOUT_MS,
            )
            assert page.inner_text("#doc-extract-status").startswith("Done"), page.inner_text("#doc-extract-status")
            data = json.loads(page.inner_text("#doc-json"))
            assert set(data) == {"invoice_number", "date", "total"}  # the schema's fields, nothing else
            assert page.locator("#doc-sources tbody tr").count() == 3
        finally:
            context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
