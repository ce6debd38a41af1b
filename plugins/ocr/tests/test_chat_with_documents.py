"""Chat and Responses about a document, end to end: a real server on a socket, the
official SDK, the embedded text-only SmolLM2, files uploaded with ``files.create``
(or sent inline), read by this plugin through the core's ``flexserv_expand_file_parts``.

The prompt is checked to hold the document's text exactly: the request's
``prompt_tokens`` equal ``/tokenize``'s count of the same message with the text
the document should become written out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from flexserv_ocr.testing import INVOICE_LINES, data_url, image_pdf, render_lines, text_pdf

from flexserv_core.testing import ServedApp, make_app

pytestmark = pytest.mark.slow

KEYS = {"alice": "alice-key", "bob": "bob-key", "ops": "ops-key"}
QUESTION = "What is the invoice's total?"
PDF = text_pdf([INVOICE_LINES[:2], INVOICE_LINES[2:]])
#: What PDF becomes in the prompt: each page after its marker, set off from the question by a blank line.
EXPECTED = (
    f"{QUESTION}\n\n--- page 1 of 2 ---\n"
    + "\n".join(INVOICE_LINES[:2])
    + "\n--- page 2 of 2 ---\n"
    + "\n".join(INVOICE_LINES[2:])
)


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("chat-documents")
    keys = root / "keys.txt"
    keys.write_text(f"{KEYS['alice']} inference\n{KEYS['bob']} inference\n{KEYS['ops']}\n")  # ops: every scope
    settings = {"state_url": f"sqlite:///{root / 'state.db'}", "api_keys_file": str(keys)}
    with ServedApp(
        make_app(["ocr", "files", "transformers", "responses", "state-sqlite", "tokenize"], settings=settings)
    ) as url:
        yield url


def sdk(base_url: str, who: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=KEYS[who], max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def uploaded(base_url: str) -> str:
    file_id: str = sdk(base_url, "alice").files.create(file=("invoice.pdf", PDF), purpose="user_data").id
    return file_id


@pytest.fixture(scope="module")
def expected_tokens(base_url: str) -> int:
    """The prompt tokens of one user message holding EXPECTED (``/tokenize`` needs the operations scope)."""
    response = httpx.post(
        f"{base_url}/tokenize",
        json={"messages": [{"role": "user", "content": EXPECTED}]},
        headers={"Authorization": f"Bearer {KEYS['ops']}"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    count: int = response.json()["count"]
    return count


def ask(file: dict[str, Any]) -> Any:  # the SDK's message TypedDicts have no file-data-as-dict form
    return [{"role": "user", "content": [{"type": "text", "text": QUESTION}, {"type": "file", "file": file}]}]


def chat(client: openai.OpenAI, file: dict[str, Any], **kwargs: Any) -> Any:
    return client.chat.completions.create(
        model="SmolLM2-135M-Instruct", messages=ask(file), max_tokens=6, temperature=0, **kwargs
    )


def test_chat_about_an_uploaded_pdf(base_url: str, uploaded: str, expected_tokens: int) -> None:
    alice = sdk(base_url, "alice")
    plain = alice.chat.completions.create(
        model="SmolLM2-135M-Instruct", messages=[{"role": "user", "content": QUESTION}], max_tokens=6, temperature=0
    )
    answer = chat(alice, {"file_id": uploaded})
    assert answer.choices[0].message.content is not None and answer.usage is not None and plain.usage is not None
    assert answer.usage.prompt_tokens == expected_tokens
    assert answer.usage.prompt_tokens > plain.usage.prompt_tokens + 40  # the document's ~60 tokens are there
    metrics = httpx.get(f"{base_url}/metrics", headers={"Authorization": f"Bearer {KEYS['ops']}"}, timeout=30).text
    assert 'flexserv:ocr_pages_total{model="rapidocr",source="text_layer"}' in metrics  # its pages are counted


def test_inline_file_data_and_streaming(base_url: str, expected_tokens: int) -> None:
    alice = sdk(base_url, "alice")
    inline = {"file_data": data_url(PDF, "application/pdf"), "filename": "invoice.pdf"}
    answer = chat(alice, inline)
    assert answer.usage is not None and answer.usage.prompt_tokens == expected_tokens
    chunks = list(chat(alice, inline, stream=True, stream_options={"include_usage": True}))
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens == expected_tokens


def test_a_scanned_pdf_is_read_by_ocr(base_url: str, expected_tokens: int) -> None:
    """No text layer: the page is OCRed, and its text reaches the prompt as the text layer's would."""
    scan = image_pdf([render_lines(INVOICE_LINES[:2]), render_lines(INVOICE_LINES[2:])])
    answer = chat(sdk(base_url, "alice"), {"file_data": data_url(scan, "application/pdf")})
    # RapidOCR reads these rendered lines exactly (test_accuracy.py), so the prompt is the same
    assert answer.usage is not None and answer.usage.prompt_tokens == expected_tokens
    metrics = httpx.get(f"{base_url}/metrics", headers={"Authorization": f"Bearer {KEYS['ops']}"}, timeout=30).text
    assert 'flexserv:ocr_pages_total{model="rapidocr",source="ocr"} 2.0' in metrics


def test_responses_input_file(base_url: str, uploaded: str, expected_tokens: int) -> None:
    alice = sdk(base_url, "alice")
    for file in ({"file_id": uploaded}, {"file_data": data_url(PDF, "application/pdf"), "filename": "a.pdf"}):
        content: Any = [{"type": "input_text", "text": QUESTION}, {"type": "input_file", **file}]
        response = alice.responses.create(
            model="SmolLM2-135M-Instruct",
            input=[{"role": "user", "content": content}],
            max_output_tokens=16,
            temperature=0,
        )
        assert response.status == "completed" or response.status == "incomplete"
        assert response.usage is not None and response.usage.input_tokens == expected_tokens


def test_a_document_longer_than_the_context_is_a_400_naming_the_limit(base_url: str) -> None:
    line = "Line of a long report that goes on and on, page after page, about nothing much at all."
    pdf = text_pdf([[f"{line} {i}" for i in range(48)] for _ in range(15)], font_size=8)  # ~66,000 characters
    with pytest.raises(openai.BadRequestError) as caught:
        chat(sdk(base_url, "alice"), {"file_data": data_url(pdf, "application/pdf")})
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "context_length_exceeded"
    assert error["param"] == "messages[0].content[1].file"
    # the served context: 8,192 tokens, or less where the engine's automatic KV budget
    # holds fewer of them (5,824 in float32, the dtype of CPUs without bf16)
    models = httpx.get(f"{base_url}/v1/models", headers={"Authorization": f"Bearer {KEYS['ops']}"}, timeout=30)
    context = next(m["max_model_len"] for m in models.json()["data"] if m["id"] == "SmolLM2-135M-Instruct")
    assert f"{context * 6} characters" in error["message"]


def test_files_are_the_uploaders_and_the_operators(base_url: str, uploaded: str, expected_tokens: int) -> None:
    bob, ops = sdk(base_url, "bob"), sdk(base_url, "ops")
    with pytest.raises(openai.NotFoundError) as caught:
        chat(bob, {"file_id": uploaded})
    assert isinstance(caught.value.body, dict) and caught.value.body["code"] == "file_not_found"
    with pytest.raises(openai.NotFoundError):
        bob.files.retrieve(uploaded)
    # an operations key reads every key's files: metadata, bytes, and in chat
    assert ops.files.retrieve(uploaded).filename == "invoice.pdf"
    assert ops.files.content(uploaded).read() == PDF
    answer = chat(ops, {"file_id": uploaded})
    assert answer.usage is not None and answer.usage.prompt_tokens == expected_tokens
    assert [f.id for f in ops.files.list().data] == []  # listing shows a key its own files


def test_operators_delete_any_file(base_url: str, tmp_path: Path) -> None:
    alice, ops = sdk(base_url, "alice"), sdk(base_url, "ops")
    created = alice.files.create(file=("gone.pdf", PDF), purpose="user_data")
    assert ops.files.delete(created.id).deleted
    with pytest.raises(openai.NotFoundError):
        alice.files.retrieve(created.id)
