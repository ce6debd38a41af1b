"""The part of a tokenizer the text model uses, as a type.

Two classes provide it: transformers' tokenizers (the transformers model code,
and checkpoints whose tokenizer class rebuilds its pipeline in code) and
:class:`~flexserv_transformers.fast_tokenizer.FastTokenizer` (FlexServ's own
Llama forward, which then needs no transformers import at all).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class TextTokenizer(Protocol):
    """What :class:`~flexserv_transformers.model.TransformersTextModel`, the
    incremental detokenizer and the grammar compiler call on a tokenizer."""

    @property
    def chat_template(self) -> str | dict[str, str] | None:
        """The checkpoint's Jinja chat template (a dict when it names several)."""
        ...

    @property
    def eos_token_id(self) -> int | None: ...

    def __call__(self, text: str, *, add_special_tokens: bool = True) -> Mapping[str, Any]:
        """``{"input_ids": [...], ...}`` of one text."""
        ...

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str | list[str]: ...

    def convert_tokens_to_ids(self, tokens: str) -> int | list[int]: ...

    def apply_chat_template(
        self,
        conversation: list[dict[str, Any]],
        *,
        chat_template: str | None = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        return_dict: bool = True,
        **kwargs: Any,
    ) -> object:
        """The conversation rendered by the chat template: its text with
        ``tokenize=False``, its ids with ``tokenize=True, return_dict=False``."""
        ...


def decode_text(tokenizer: TextTokenizer, token_ids: list[int], *, skip_special_tokens: bool) -> str:
    """``tokenizer.decode`` of one id list: a string (transformers' annotation also allows a batch)."""
    text = tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
    assert isinstance(text, str)
    return text


def special_token_texts(tokenizer: TextTokenizer) -> list[str]:
    """The texts of the tokenizer's special tokens (its control tokens: ``<|im_start|>``,
    ``<|endoftext|>``...), which text a client sends must not become."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return [token.content for token in backend.get_added_tokens_decoder().values() if token.special]
    return list(getattr(tokenizer, "all_special_tokens", ()))
