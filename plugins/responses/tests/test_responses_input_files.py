"""Responses ``input_file`` parts become the chat path's ``file`` parts (read there by the
``flexserv_expand_file_parts`` hook); malformed ones are a 400 naming the part."""

from __future__ import annotations

from typing import Any

import pytest
from flexserv_responses.items import Conversation, add_input
from flexserv_responses.schemas import InputFile, InputMessage, InputText

from flexserv_core import InvalidRequest


def converted(content: list[dict[str, Any]]) -> Conversation:
    conversation = Conversation()
    add_input(conversation, [{"role": "user", "content": content}])
    return conversation


def test_input_file_becomes_a_chat_file_part() -> None:
    conversation = converted(
        [
            {"type": "input_text", "text": "Sum it up:"},
            {"type": "input_file", "file_id": "file-" + "a" * 32},
            {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0=", "filename": "b.pdf"},
        ]
    )
    assert conversation.messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Sum it up:"},
                {"type": "file", "file": {"file_id": "file-" + "a" * 32}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "b.pdf"}},
            ],
        }
    ]
    item = conversation.items[0]
    assert isinstance(item, InputMessage)
    assert item.content[0] == InputText(text="Sum it up:")
    assert item.content[1] == InputFile(file_id="file-" + "a" * 32)  # input_items lists it as sent


@pytest.mark.parametrize(
    ("part", "param"),
    [
        ({"type": "input_file"}, "input[0].content[0]"),
        ({"type": "input_file", "file_id": "file-x", "file_data": "eA=="}, "input[0].content[0]"),
        ({"type": "input_file", "file_url": "https://example.com/a.pdf"}, "input[0].content[0].file_url"),
        ({"type": "input_file", "file_id": 7}, "input[0].content[0].file_id"),
    ],
)
def test_malformed_input_files(part: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        converted([part])
    assert caught.value.param == param


def test_only_user_messages_carry_files() -> None:
    conversation = Conversation()
    with pytest.raises(InvalidRequest) as caught:
        add_input(conversation, [{"role": "system", "content": [{"type": "input_file", "file_id": "file-x"}]}])
    assert caught.value.param == "input[0].content[0].type"
