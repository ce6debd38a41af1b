"""``/v1/documents/extract``: JSON that validates, from the embedded SmolLM2, with source pages."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import jsonschema
import pytest
import pytest_asyncio
from flexserv_ocr.testing import INVOICE_SCHEMA, b64, image_pdf, invoice, render_lines, text_pdf
from litestar import Litestar

from flexserv_core.testing import make_app, openai_client, running_app_client

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def extract_app(tmp_path_factory: pytest.TempPathFactory) -> Litestar:
    state = tmp_path_factory.mktemp("state") / "state.db"
    return make_app(
        ["ocr", "files", "transformers", "constraints", "state-sqlite"], settings={"state_url": f"sqlite:///{state}"}
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http(extract_app: Litestar) -> AsyncIterator[Any]:
    async with running_app_client(extract_app) as c:
        yield c


@pytest.mark.slow
async def test_invoice_by_file_id_validates_and_names_pages(http: Any) -> None:
    lines, _ = invoice(3)
    pdf = text_pdf([["Cover letter: thank you for your order."], lines])
    uploaded = await openai_client(http).files.create(file=("invoice.pdf", pdf), purpose="user_data")
    response = await http.post("/v1/documents/extract", json={"file_id": uploaded.id, "schema": INVOICE_SCHEMA})
    assert response.status_code == 200, response.text
    body = response.json()
    jsonschema.validate(body["data"], INVOICE_SCHEMA)  # validity is the bar
    assert body["model"] == "SmolLM2-135M-Instruct" and body["ocr_model"] is None
    assert body["pages"] == [{"page": 1, "source": "text_layer"}, {"page": 2, "source": "text_layer"}]
    assert {s["path"] for s in body["sources"]} == {f"/{k}" for k in INVOICE_SCHEMA["properties"]}
    for source in body["sources"]:
        # a value found in the document is found on the invoice's page, never the cover letter
        assert source["page"] in (2, None)
    assert body["usage"]["completion_tokens"] > 0


@pytest.mark.slow
async def test_scanned_invoice_goes_through_ocr(http: Any) -> None:
    lines, _ = invoice(4)
    scan = image_pdf([render_lines(lines, size=30)])
    response = await http.post("/v1/documents/extract", json={"file_data": b64(scan), "schema": INVOICE_SCHEMA})
    assert response.status_code == 200, response.text
    body = response.json()
    jsonschema.validate(body["data"], INVOICE_SCHEMA)
    assert body["ocr_model"] == "rapidocr" and body["pages"] == [{"page": 1, "source": "ocr"}]


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ({"type": "object", "properties": {"a": {"type": "nonsense"}}}, "not a valid JSON schema"),
        ({"type": "array", "items": {"type": "string"}}, "must describe a JSON object"),
    ],
)
async def test_bad_schemas(http: Any, schema: dict[str, Any], fragment: str) -> None:
    response = await http.post("/v1/documents/extract", json={"file_data": b64(text_pdf([["x"]])), "schema": schema})
    assert response.status_code == 400 and response.json()["error"]["param"] == "schema"
    assert fragment in response.json()["error"]["message"]


async def test_inputs(http: Any) -> None:
    pdf = b64(text_pdf([["x"]]))
    both = await http.post(
        "/v1/documents/extract", json={"file_data": pdf, "file_id": "file-" + "0" * 32, "schema": INVOICE_SCHEMA}
    )
    assert both.status_code == 400 and both.json()["error"]["code"] == "invalid_input"
    missing = await http.post("/v1/documents/extract", json={"file_id": "file-" + "0" * 32, "schema": INVOICE_SCHEMA})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "file_not_found"
    traversal = await http.post("/v1/documents/extract", json={"file_id": "../state.db", "schema": INVOICE_SCHEMA})
    assert traversal.status_code == 400 and traversal.json()["error"]["code"] == "invalid_file_id"
