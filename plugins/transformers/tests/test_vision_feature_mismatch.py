"""A processor and model that disagree about an image's token count fail only the
request with that image: a 400 naming the problem, while the paged engine's batch
(a text stream decoding in the same steps) continues, without an engine restart.

The tiny LLaVA's vision tower makes 16 features per image; its processor is
edited after loading to expand each image into 17 tokens
(``num_additional_image_tokens`` 2 instead of 1), as a mismatched processor
config would.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from flexserv_transformers.testing import build_tiny_llava
from PIL import Image

from flexserv_core.testing import ServedApp, make_app

pytestmark = pytest.mark.slow


def data_url(color: tuple[int, int, int]) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (40, 40), color).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


IMAGE_CHAT = [
    {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": data_url((200, 40, 40))}},
            {"type": "text", "text": "What is it?"},
        ],
    }
]
IMAGE_INPUT = [
    {
        "role": "user",
        "content": [
            {"type": "input_image", "image_url": data_url((200, 40, 40))},
            {"type": "input_text", "text": "What is it?"},
        ],
    }
]
TEXT_CHAT = [{"role": "user", "content": "Tell me a long story."}]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, flexserv_test_cache: Path) -> Iterator[tuple[str, Any]]:
    vlm = build_tiny_llava(tmp_path_factory.mktemp("tiny-llava"), max_position_embeddings=2048)
    app = make_app(
        ["transformers", "image-input", "responses"],
        settings={
            "model": [f"vlm={vlm}"],
            "dtype": "float32",
            "cache_dir": str(flexserv_test_cache),
            "transformers_engine": "paged",
        },
    )
    with ServedApp(app) as url:
        yield url, app.state.flexserv


async def test_a_feature_count_mismatch_fails_only_its_request(served: tuple[str, Any]) -> None:
    url, server = served
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120) as client:
        good = await client.chat.completions.create(model="vlm", messages=IMAGE_CHAT, max_tokens=4, temperature=0)
        assert good.usage.prompt_tokens > 16
        model = server.registry.model_if_loaded("vlm")
        assert model is not None
        # The text request runs to its max_tokens (no end-of-sequence token can be sampled),
        # long enough to be still decoding while the three image requests are refused (the
        # tiny model made 48 tokens before they were, once, in a loaded CI run).
        text_request: dict[str, Any] = {
            "model": "vlm",
            "messages": TEXT_CHAT,
            "max_tokens": 1500,
            "temperature": 0,
            "logit_bias": {str(t): -100 for t in model.eos_token_ids},
        }
        alone = await client.chat.completions.create(**text_request)
        restarts = model.engine.stats()["restarts"]

        model.processor.num_additional_image_tokens = 2
        try:
            stream = await client.chat.completions.create(**text_request, stream=True)
            pieces = []
            async for chunk in stream:
                pieces.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
                if len(pieces) == 3:  # decoding now: the image requests share its steps
                    for call in (
                        client.chat.completions.create(model="vlm", messages=IMAGE_CHAT, max_tokens=4),
                        client.chat.completions.create(model="vlm", messages=IMAGE_CHAT, max_tokens=4, stream=True),
                        client.responses.create(model="vlm", input=IMAGE_INPUT, max_output_tokens=4),
                    ):
                        with pytest.raises(openai.BadRequestError) as info:
                            await call
                        body = info.value.body
                        assert body["code"] == "image_features_mismatch", body
                        assert "16 image features" in body["message"] and "17 image tokens" in body["message"]
                    assert model.engine.stats()["active_sequences"] == 1  # the text stream, still running
        finally:
            model.processor.num_additional_image_tokens = 1

        assert "".join(pieces) == alone.choices[0].message.content
        stats = model.engine.stats()
        assert stats["restarts"] == restarts and stats["kv_cache"]["used_blocks"] == 0  # nothing held
        again = await client.chat.completions.create(model="vlm", messages=IMAGE_CHAT, max_tokens=4, temperature=0)
        assert again.choices[0].message.content == good.choices[0].message.content
