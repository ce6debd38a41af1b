"""Documents for a vision-language model: pages without a text layer reach it as page
images, pages with one as text, on a real loopback server through the ``openai`` SDK.

The model is a tiny random LLaVA built in the test (its processor turns every image
into 16 image tokens), next to a tiny text-only Llama. A document's prompt is checked
against a request that spells the same prompt out with ``image_url`` parts: equal
``prompt_tokens`` (each image is 16 tokens; OCR text would be others), and the
engine's vision tower ran (``images_encoded``, one per request with images)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from flexserv_ocr.testing import INVOICE_LINES, data_url, image_pdf, png_bytes, render_lines, text_pdf
from flexserv_transformers.testing import build_tiny_llama, build_tiny_llava
from PIL import Image

from flexserv_core.testing import ServedApp, make_app

pytestmark = pytest.mark.slow

QUESTION = "What is the total?"
#: The tiny LLaVA's tokens per image: (32 px / 8 px patches) ** 2.
IMAGE_TOKENS = 16
PAGE_1, PAGE_2, PAGE_3 = INVOICE_LINES[:2], INVOICE_LINES[2:], ["Page three", "Signed 2026"]
SCAN = image_pdf([render_lines(PAGE_1), render_lines(PAGE_2)])


def mixed_pdf() -> bytes:
    """Page 1 with a text layer, page 2 a scan (an image, no text)."""
    from fpdf import FPDF

    pdf = FPDF(unit="pt")
    pdf.add_page(format="A4")
    pdf.set_font("Helvetica", size=14)
    for line in PAGE_1:
        pdf.cell(0, 20, line, new_x="LMARGIN", new_y="NEXT")
    scan = render_lines(["A scanned second page"])
    pdf.add_page(format=(scan.width * 72 / 150, scan.height * 72 / 150))
    pdf.image(scan, x=0, y=0, w=scan.width * 72 / 150, h=scan.height * 72 / 150)
    return bytes(pdf.output())


def picture(shade: int) -> str:
    """An arbitrary image: the tiny LLaVA gives every image the same number of tokens."""
    image = Image.new("RGB", (40, 40), (shade, shade, shade))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return data_url(buffer.getvalue())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    vlm = build_tiny_llava(tmp_path_factory.mktemp("tiny-llava"), max_position_embeddings=2048)
    text = build_tiny_llama(tmp_path_factory.mktemp("tiny-text"), max_position_embeddings=2048)
    settings = {
        "model": [f"vlm={vlm}", f"text={text}"],
        "dtype": "float32",
        "cache_dir": str(tmp_path_factory.mktemp("cache")),
        "max_document_page_images": 3,
        "transformers_max_images": 4,
    }
    app = make_app(["ocr", "transformers", "image-input", "responses"], settings=settings)
    with ServedApp(app) as url:
        yield url, app.state.flexserv


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=300)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def document(data: bytes, media_type: str = "application/pdf") -> dict[str, Any]:
    return {"type": "file", "file": {"file_data": data_url(data, media_type), "filename": "doc"}}


def chat(client: openai.OpenAI, parts: list[dict[str, Any]], model: str = "vlm") -> Any:
    messages: Any = [{"role": "user", "content": parts}]
    return client.chat.completions.create(model=model, messages=messages, max_tokens=2, temperature=0)


def images_encoded(server: Any) -> int:
    model = server.registry.model_if_loaded("vlm")
    return 0 if model is None else int(model.engine.stats()["images_encoded"])


def test_a_scanned_pdf_reaches_a_vlm_as_page_images(served: tuple[str, Any]) -> None:
    url, server = served
    client = sdk(url)
    before = images_encoded(server)
    answer = chat(client, [text(QUESTION), document(SCAN)])
    # the vision tower ran for the request: its pages went as images, not as OCR text
    assert images_encoded(server) - before == 1
    spelled = chat(
        client,
        [
            text(f"{QUESTION}\n\n--- page 1 of 2 ---\n"),
            image(picture(10)),
            text("\n--- page 2 of 2 ---\n"),
            image(picture(20)),
        ],
    )
    assert answer.usage.prompt_tokens == spelled.usage.prompt_tokens  # two images' tokens, the markers as text
    plain = chat(client, [text(QUESTION)])
    assert answer.usage.prompt_tokens > plain.usage.prompt_tokens + 2 * IMAGE_TOKENS
    metrics = httpx.get(f"{url}/metrics", timeout=30).text
    assert 'flexserv:ocr_pages_total{model="rapidocr",source="image"} 2.0' in metrics
    assert 'source="ocr"' not in metrics  # nothing was OCRed


def test_an_image_file_is_one_page_image(served: tuple[str, Any]) -> None:
    url, server = served
    client = sdk(url)
    before = images_encoded(server)
    answer = chat(client, [text(QUESTION), document(png_bytes(render_lines(PAGE_3)), "image/png")])
    assert images_encoded(server) - before == 1
    spelled = chat(client, [text(f"{QUESTION}\n\n--- page 1 of 1 ---\n"), image(picture(30))])
    assert answer.usage.prompt_tokens == spelled.usage.prompt_tokens


def test_a_text_layer_stays_text_and_a_mixed_pdf_is_both(served: tuple[str, Any]) -> None:
    url, server = served
    client = sdk(url)
    before = images_encoded(server)
    layered = chat(client, [text(QUESTION), document(text_pdf([PAGE_1, PAGE_2]))])
    assert images_encoded(server) == before  # no page image
    written = "\n".join(PAGE_1) + "\n--- page 2 of 2 ---\n" + "\n".join(PAGE_2)
    as_text = chat(client, [text(f"{QUESTION}\n\n--- page 1 of 2 ---\n{written}")])
    assert layered.usage.prompt_tokens == as_text.usage.prompt_tokens

    mixed = chat(client, [text(QUESTION), document(mixed_pdf())])
    assert images_encoded(server) - before == 1  # the scanned page (1 image: the prompt tokens below)
    first = "\n".join(PAGE_1)
    spelled = chat(
        client, [text(f"{QUESTION}\n\n--- page 1 of 2 ---\n{first}\n--- page 2 of 2 ---\n"), image(picture(40))]
    )
    assert mixed.usage.prompt_tokens == spelled.usage.prompt_tokens


def test_too_many_page_images_is_a_400_naming_the_limit(served: tuple[str, Any]) -> None:
    url, server = served
    client = sdk(url)
    before = images_encoded(server)
    four = image_pdf([render_lines([f"Page {n}"]) for n in range(1, 5)])
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, [text(QUESTION), document(four)])
    body: Any = info.value.body
    assert body["code"] == "too_many_page_images" and body["param"] == "messages[0].content[1].file"
    assert "4 pages without a text layer" in body["message"]
    assert "--ocr-max-page-images" in body["message"] and "at most 3" in body["message"]

    # the model's own limit binds when image parts took some of it: 2 images + 3 pages > 4
    three = image_pdf([render_lines([f"Page {n}"]) for n in range(1, 4)])
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, [image(picture(50)), image(picture(60)), document(three)])
    body = info.value.body
    assert body["code"] == "too_many_page_images" and body["param"] == "messages[0].content[2].file"
    assert "'vlm' takes at most 4 images" in body["message"] and "2 of them" in body["message"]

    # two documents share the request's budget: 2 + 2 pages > 3
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, [document(SCAN), document(SCAN)])
    body = info.value.body
    assert body["code"] == "too_many_page_images" and body["param"] == "messages[0].content[1].file"
    assert "4 pages without a text layer" in body["message"]
    assert images_encoded(server) == before  # nothing reached the model


def test_a_text_only_model_still_gets_the_ocr_text(served: tuple[str, Any]) -> None:
    url, _server = served
    client = sdk(url)
    scan = image_pdf([render_lines(PAGE_1)])
    answer = chat(client, [text(QUESTION), document(scan)], model="text")
    # RapidOCR reads these rendered lines exactly (test_accuracy.py)
    as_text = chat(client, [text(f"{QUESTION}\n\n--- page 1 of 1 ---\n" + "\n".join(PAGE_1))], model="text")
    assert answer.usage.prompt_tokens == as_text.usage.prompt_tokens


def test_responses_input_file_reaches_a_vlm_as_page_images(served: tuple[str, Any]) -> None:
    url, server = served
    client = sdk(url)
    scan = image_pdf([render_lines(PAGE_3), render_lines(["Responses"])])  # pages no other test sent
    before = images_encoded(server)
    content: Any = [
        {"type": "input_text", "text": QUESTION},
        {"type": "input_file", "file_data": data_url(scan, "application/pdf"), "filename": "scan.pdf"},
    ]
    response = client.responses.create(
        model="vlm", input=[{"role": "user", "content": content}], max_output_tokens=2, temperature=0
    )
    assert images_encoded(server) - before == 1
    expected = chat(client, [text(QUESTION), document(scan)])
    assert response.usage is not None and response.usage.input_tokens == expected.usage.prompt_tokens
