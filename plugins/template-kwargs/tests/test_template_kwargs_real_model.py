"""A real model through the transformers backend: the testing kit's tiny
random Llama (:func:`build_tiny_llama`) with a chat template of this module's that
branches on ``enable_thinking``.

The thinking branch adds tokens to the prompt, so ``usage.prompt_tokens`` of each
response says which branch that request was rendered with.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from flexserv_transformers.testing import build_tiny_llama

from flexserv_core.testing import app_client, make_app, openai_client

pytestmark = pytest.mark.slow

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>"
    "{% if enable_thinking %}<think> let me think step by step </think>{% endif %}{% endif %}"
)
USER = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[bool, int]]:
    """The model directory, and the prompt length of each branch as the tokenizer renders it."""
    directory = tmp_path_factory.mktemp("tiny-thinking-llama")
    build_tiny_llama(directory, chat_template=TEMPLATE)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    lengths = {
        flag: len(
            tokenizer.apply_chat_template(
                USER, add_generation_prompt=True, tokenize=True, return_dict=False, enable_thinking=flag
            )
        )
        for flag in (True, False)
    }
    assert lengths[True] > lengths[False]
    return directory, lengths


async def _prompt_tokens(sdk: Any, **extra: Any) -> int:
    r = await sdk.chat.completions.create(
        model="tiny", messages=USER, max_tokens=2, temperature=0, extra_body=extra or None
    )
    return r.usage.prompt_tokens


async def test_16_concurrent_requests_alternating_enable_thinking(tiny_model: tuple[Path, dict[bool, int]]) -> None:
    directory, lengths = tiny_model
    app = make_app(["template-kwargs", "transformers"], settings={"model": [f"tiny={directory}"]})
    async with app_client(app) as client:
        sdk = openai_client(client)
        await _prompt_tokens(sdk)  # load once before the burst
        flags = [i % 2 == 0 for i in range(16)]
        got = await asyncio.gather(
            *(
                _prompt_tokens(sdk, enable_thinking=f)
                if i % 4 < 2
                else _prompt_tokens(sdk, chat_template_kwargs={"enable_thinking": f})
                for i, f in enumerate(flags)
            )
        )
    assert got == [lengths[f] for f in flags]


async def test_server_default_and_request_override(tiny_model: tuple[Path, dict[bool, int]]) -> None:
    directory, lengths = tiny_model
    app = make_app(
        ["template-kwargs", "transformers"],
        settings={"model": [f"tiny={directory}"], "template_kwargs_defaults": '{"enable_thinking": true}'},
    )
    async with app_client(app) as client:
        sdk = openai_client(client)
        assert await _prompt_tokens(sdk) == lengths[True], "the server default applies"
        assert await _prompt_tokens(sdk, enable_thinking=False) == lengths[False], "the request wins"
        assert (
            await _prompt_tokens(sdk, chat_template_kwargs={"enable_thinking": False}, enable_thinking=True)
            == lengths[True]
        )
        assert await _prompt_tokens(sdk, chat_template_kwargs={"not_in_template": 1}) == lengths[True], (
            "unused keys ignored"
        )
