"""Image prompts inside the engines: prefix-cache keys carry each image's digest,
and the paged engine's prefill with image features matches the model's own forward
pass (the simple engine), for a LLaVA (one run of image tokens per image) and an
Idefics3 (SmolVLM's architecture: tiles, several runs per image)."""

from __future__ import annotations

import asyncio
import hashlib
import io
from pathlib import Path
from typing import Any

import pytest
from flexserv_batching import TokenChannel
from flexserv_transformers.engine.sequence import Sequence
from flexserv_transformers.media import PromptMedia
from flexserv_transformers.testing import build_tiny_idefics3, build_tiny_llava
from PIL import Image

from flexserv_core import ImageInput, ModelKind, ModelSpec, SamplingParams

IMG = 99  # the image token id in the unit tests


def sequence(tokens: list[int], digests: list[str]) -> Sequence:
    media = PromptMedia({}, digests, tokens, IMG)
    loop = asyncio.new_event_loop()
    try:
        return Sequence(
            tokens,
            SamplingParams(max_tokens=4),
            max_total_tokens=64,
            channel=TokenChannel(loop),
            vocab_size=128,
            media=media,
        )  # type: ignore[arg-type]
    finally:
        loop.close()


def test_image_tokens_are_keyed_on_their_image() -> None:
    tokens = [1, 2, IMG, IMG, IMG, 3, IMG, IMG, IMG, 4]
    a = sequence(tokens, ["red", "blue"])
    assert a.key_content(0, 2) == (1, 2)  # text before the first image: plain token ids
    assert a.key_content(0, 6) == (1, 2, "red", "red", "red", 3)
    assert a.key_content(6, 10) == ("blue", "blue", "blue", 4)
    b = sequence(tokens, ["red", "green"])
    assert b.key_content(0, 6) == a.key_content(0, 6) and b.key_content(6, 10) != a.key_content(6, 10)
    # more runs than images (tiled images): every image token stands for all the images together
    tiled = sequence([IMG, IMG, 5, IMG, IMG, 6], ["red"])
    marks = set(tiled.key_content(0, 6)) - {5, 6}
    assert len(marks) == 1 and marks != {"red"}
    assert sequence([IMG, IMG, 5, IMG, IMG, 6], ["blue"]).key_content(0, 6) != tiled.key_content(0, 6)


def test_feature_index_maps_positions_to_feature_rows() -> None:
    media = PromptMedia({}, ["a", "b"], [1, IMG, IMG, 2, IMG, 3], IMG)
    assert media.index(0, 6).tolist() == [-1, 0, 1, -1, 2, -1]
    assert media.index(2, 5).tolist() == [1, -1, 2]
    assert media.index(5, 8).tolist() == [-1, -1, -1]
    assert media.overlaps(0, 2) and not media.overlaps(5, 9) and not media.overlaps(0, 1)


def image(color: tuple[int, int, int]) -> ImageInput:
    picture = Image.new("RGB", (60, 40), color)
    for x in range(40):
        picture.putpixel((x, x), (0, 0, 0))
    buf = io.BytesIO()
    picture.save(buf, "PNG")
    return ImageInput(image=picture, digest=hashlib.sha256(buf.getvalue()).hexdigest())


async def greedy(model: Any, prompt: list[int]) -> list[int]:
    return [d.token_id async for d in model.generate(prompt, SamplingParams(max_tokens=8, temperature=0.0))]


@pytest.mark.slow
@pytest.mark.parametrize("build", [build_tiny_llava, build_tiny_idefics3])
async def test_paged_prefill_with_images_matches_the_models_forward(
    build: Any, tmp_path: Path, flexserv_test_cache: Path, load_model: Any
) -> None:
    spec = ModelSpec(name="vlm", kind=ModelKind.TEXT, source=str(build(tmp_path / "vlm")))
    red, blue = image((220, 20, 20)), image((20, 20, 220))

    def messages(picture: ImageInput) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [{"type": "image", "image": picture}, {"type": "text", "text": "Hm?"}]}]

    outputs: dict[str, list[list[int]]] = {}
    for engine in ("simple", "paged"):
        extra = {"transformers_kv_block_size": 4, "transformers_max_batch_tokens": 16} if engine == "paged" else {}
        model = load_model(spec, flexserv_test_cache, dtype="float32", transformers_engine=engine, **extra)
        try:
            runs = [
                await greedy(model, model.render_chat(messages(red), {})),
                await greedy(model, model.render_chat(messages(blue), {})),
                await greedy(model, model.render_chat(messages(red), {})),  # from the prefix cache when paged
            ]
            outputs[engine] = runs
            if engine == "paged":
                stats = model.engine.stats()
                assert stats["prefix_cache"]["hit_blocks"] > 0 and stats["images_encoded"] == 2
        finally:
            model.unload()
    assert outputs["paged"] == outputs["simple"]
    assert outputs["paged"][0] == outputs["paged"][2] != outputs["paged"][1]
