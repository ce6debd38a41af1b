"""``/v1/responses`` with the deterministic fake backend, through the official SDK."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from flexserv_core.testing import FAKE_SCRIPT, FakeBackendPlugin

#: The fake ends its output with an end-of-sequence token after this many tokens.
EOS_AFTER = 10
ANSWER = FAKE_SCRIPT[:EOS_AFTER]


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> FakeBackendPlugin:
    """The fake ends after :data:`EOS_AFTER` tokens; a test may pass other options (indirect)."""
    options = getattr(request, "param", {"eos_after": EOS_AFTER})
    return FakeBackendPlugin(**options)


async def test_create_non_streaming(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    r = await flexserv_openai.responses.create(
        model="fake-model", input="hi", instructions="Be brief.", metadata={"k": "v"}
    )
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed"
    assert r.model == "fake-model" and r.instructions == "Be brief." and r.metadata == {"k": "v"}
    assert [item.type for item in r.output] == ["message"]
    message = r.output[0]
    assert message.role == "assistant" and message.status == "completed"
    assert [part.type for part in message.content] == ["output_text"]
    assert r.output_text == ANSWER
    prompt = "system: Be brief.\nuser: hi\nassistant: "
    assert fake.last_prompt == prompt
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens) == (
        len(prompt),
        EOS_AFTER,
        len(prompt) + EOS_AFTER,
    )
    assert r.usage.output_tokens_details.reasoning_tokens == 0


async def test_input_items_and_max_output_tokens(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    r = await flexserv_openai.responses.create(
        model="fake-model",
        input=[
            {"role": "developer", "content": "dev"},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
            },
            {"role": "assistant", "content": [{"type": "output_text", "text": "earlier"}]},
            {"role": "user", "content": "again"},
        ],
        max_output_tokens=4,
        temperature=0.5,
        top_p=0.9,
    )
    assert fake.last_prompt == "system: dev\nuser: ab\nassistant: earlier\nuser: again\nassistant: "
    listed = (await flexserv_openai.responses.input_items.list(r.id, order="asc")).data
    # as OpenAI lists them: an assistant's text is output_text, whatever part type it was sent as
    assert [[part.type for part in item.content] for item in listed] == [
        ["input_text"],
        ["input_text", "input_text"],
        ["output_text"],
        ["input_text"],
    ]
    params = fake.backend.models[0].params_log[-1]
    assert (params.max_tokens, params.temperature, params.top_p) == (4, 0.5, 0.9)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text == FAKE_SCRIPT[:4] and r.output[0].status == "incomplete"


async def test_an_assistant_string_is_listed_as_output_text(flexserv_openai: Any) -> None:
    said = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "?"},
    ]
    r = await flexserv_openai.responses.create(model="fake-model", input=said, max_output_tokens=2)
    listed = (await flexserv_openai.responses.input_items.list(r.id, order="asc")).data
    assert [(item.role, item.content[0].type, item.content[0].text) for item in listed] == [
        ("user", "input_text", "Hi"),
        ("assistant", "output_text", "Hello"),
        ("user", "input_text", "?"),
    ]


async def test_previous_response_id_continues_the_conversation(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    first = await flexserv_openai.responses.create(model="fake-model", input="one", instructions="first rules")
    second = await flexserv_openai.responses.create(
        model="fake-model", input="two", previous_response_id=first.id, instructions="second rules"
    )
    # instructions are not inherited; the first exchange is
    assert fake.last_prompt == f"system: second rules\nuser: one\nassistant: {ANSWER}\nuser: two\nassistant: "
    assert second.previous_response_id == first.id
    third = await flexserv_openai.responses.create(model="fake-model", input="three", previous_response_id=second.id)
    assert third.status == "completed"
    assert fake.last_prompt == (
        f"user: one\nassistant: {ANSWER}\nuser: two\nassistant: {ANSWER}\nuser: three\nassistant: "
    )


async def test_retrieve_delete_and_input_items(flexserv_openai: Any) -> None:
    r = await flexserv_openai.responses.create(
        model="fake-model", input=[{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]
    )
    got = await flexserv_openai.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text and got.usage.total_tokens == r.usage.total_tokens
    items = await flexserv_openai.responses.input_items.list(r.id, order="asc")
    assert [item.content[0].text for item in items.data] == ["x", "y"]
    assert [item.role for item in items.data] == ["user", "user"]
    for call, param in [
        (flexserv_openai.responses.retrieve(r.id, stream=True), "stream"),
        (flexserv_openai.responses.retrieve(r.id, starting_after=3), "starting_after"),
        (flexserv_openai.responses.retrieve(r.id, include=["message.output_text.logprobs"]), "include"),
        (flexserv_openai.responses.input_items.list(r.id, include=["message.output_text.logprobs"]), "include"),
    ]:
        with pytest.raises(openai.BadRequestError) as refused:
            await call
        assert (refused.value.body["param"], refused.value.body["code"]) == (param, "unsupported_parameter")
    assert (await flexserv_openai.responses.retrieve(r.id, include=[], stream=False)).id == r.id
    await flexserv_openai.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        await flexserv_openai.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        await flexserv_openai.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError) as info:
        await flexserv_openai.responses.create(model="fake-model", input="z", previous_response_id=r.id)
    assert info.value.body["param"] == "previous_response_id"


async def test_input_items_page_after_an_item_and_refuse_an_unknown_cursor(flexserv_openai: Any) -> None:
    r = await flexserv_openai.responses.create(
        model="fake-model", input=[{"role": "user", "content": text} for text in ("a", "b", "c")]
    )
    first = await flexserv_openai.responses.input_items.list(r.id, order="asc", limit=1)
    assert [item.content[0].text for item in first.data] == ["a"] and first.has_more
    rest = await flexserv_openai.responses.input_items.list(r.id, order="asc", after=first.last_id)
    assert [item.content[0].text for item in rest.data] == ["b", "c"] and not rest.has_more
    with pytest.raises(openai.BadRequestError) as refused:  # was a 200 with an empty page
        await flexserv_openai.responses.input_items.list(r.id, after="msg_not_in_this_list")
    assert (refused.value.body["param"], refused.value.body["code"]) == ("after", "invalid_value")


@pytest.mark.parametrize(
    ("metadata", "says"),
    [
        ({f"k{i}": "v" for i in range(17)}, "at most 16"),
        ({f"k{i}": "v" for i in range(100)}, "at most 16"),
        ({"k" * 65: "v"}, "at most 64 characters"),
        ({"k": "v" * 513}, "at most 512 characters"),
        ({"k": "v" * 10_000}, "at most 512 characters"),
    ],
)
async def test_metadata_beyond_openai_bounds_is_refused(
    flexserv_client: Any, metadata: dict[str, str], says: str
) -> None:
    r = await flexserv_client.post("/v1/responses", json={"model": "fake-model", "input": "x", "metadata": metadata})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == ("metadata", "invalid_value") and says in error["message"]


async def test_metadata_at_openai_bounds_is_stored(flexserv_openai: Any) -> None:
    metadata = {f"{i:02d}" + "k" * 62: "v" * 512 for i in range(16)}
    r = await flexserv_openai.responses.create(model="fake-model", input="x", metadata=metadata)
    assert (await flexserv_openai.responses.retrieve(r.id)).metadata == metadata


async def test_store_false_is_not_kept(flexserv_openai: Any) -> None:
    r = await flexserv_openai.responses.create(model="fake-model", input="x", store=False)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        await flexserv_openai.responses.retrieve(r.id)


EXPECTED_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    *["response.output_text.delta"] * EOS_AFTER,
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


async def test_stream_events_in_order(flexserv_openai: Any) -> None:
    full = await flexserv_openai.responses.create(model="fake-model", input="hi")
    stream = await flexserv_openai.responses.create(model="fake-model", input="hi", stream=True)
    events = [event async for event in stream]
    assert [e.type for e in events] == EXPECTED_EVENTS
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    ids = {e.response.id for e in events if e.type.startswith("response.") and hasattr(e, "response")}
    assert len(ids) == 1
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == full.output_text == ANSWER
    item_id = events[2].item.id
    assert all(e.item_id == item_id for e in events if hasattr(e, "item_id"))
    final = events[-1].response
    assert final.status == "completed" and final.output_text == ANSWER and final.usage.output_tokens == EOS_AFTER
    assert final.output[0].id == item_id
    # streamed responses are stored too
    assert (await flexserv_openai.responses.retrieve(final.id)).output_text == ANSWER


async def test_sdk_stream_helper(flexserv_openai: Any) -> None:
    async with flexserv_openai.responses.stream(model="fake-model", input="hi") as stream:
        texts = [event.delta async for event in stream if event.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(texts) == final.output_text == ANSWER


async def test_stream_incomplete_at_max_output_tokens(flexserv_openai: Any) -> None:
    stream = await flexserv_openai.responses.create(model="fake-model", input="hi", stream=True, max_output_tokens=3)
    events = [event async for event in stream]
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    assert events[-2].item.status == "incomplete" and events[-2].item.content[0].text == FAKE_SCRIPT[:3]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"background": True}, "background"),
        ({"include": ["reasoning.encrypted_content"]}, "include"),
        ({"reasoning": {"effort": "high"}}, "reasoning"),
        ({"truncation": "auto"}, "truncation"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"reasoning": {"generate_summary": "auto"}}, "reasoning"),
        ({"reasoning": {"context": "all_turns"}}, "reasoning.context"),
        ({"moderation": {"model": "omni-moderation-latest"}}, "moderation"),
        ({"background_options": {"completion_window": "2h"}}, "background_options"),
        ({"image": {"size": "1024x1024"}}, "image"),
        ({"access_programs": {"x": 1}}, "access_programs"),
    ],
)
async def test_unsupported_parameters_are_named(flexserv_openai: Any, extra: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await flexserv_openai.responses.create(model="fake-model", input="x", extra_body=extra)
    assert info.value.body["param"] == param and info.value.body["code"] == "unsupported_parameter"


@pytest.mark.parametrize(
    ("extra", "instead"),
    [
        ({"max_tokens": 5}, "'max_output_tokens'"),
        ({"max_completion_tokens": 5}, "'max_output_tokens'"),
        ({"response_format": {"type": "json_object"}}, "'text.format'"),
        ({"n": 2}, "/v1/chat/completions"),
        ({"stop": ["\n"]}, "/v1/chat/completions"),
        ({"seed": 7}, "/v1/chat/completions"),
        ({"logit_bias": {"65": 10}}, "/v1/chat/completions"),
        ({"frequency_penalty": 0.5}, "/v1/chat/completions"),
        ({"presence_penalty": 0.5}, "/v1/chat/completions"),
        ({"logprobs": True}, "/v1/chat/completions"),
        ({"top_k": 5}, "/v1/chat/completions"),
        ({"min_p": 0.1}, "/v1/chat/completions"),
        ({"repetition_penalty": 1.2}, "/v1/chat/completions"),
        ({"min_tokens": 3}, "/v1/chat/completions"),
        ({"ignore_eos": True}, "/v1/chat/completions"),
    ],
)
async def test_chat_parameters_are_refused_with_what_to_send_instead(
    flexserv_client: Any, extra: dict[str, Any], instead: str
) -> None:
    """Dropped as unknown fields (only a header said so), a chat cap or sampling setting
    would be silently ignored."""
    (name,) = extra
    r = await flexserv_client.post("/v1/responses", json={"model": "fake-model", "input": "x", **extra})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("unsupported_parameter", name)
    assert f"'{name}'" in error["message"] and instead in error["message"]


async def test_neutral_chat_parameter_values_are_accepted(flexserv_client: Any) -> None:
    neutral = {"n": 1, "stop": None, "logit_bias": {}, "frequency_penalty": 0, "presence_penalty": 0.0, "seed": None}
    r = await flexserv_client.post("/v1/responses", json={"model": "fake-model", "input": "x", **neutral})
    assert r.status_code == 200, r.text
    assert "x-flexserv-ignored-fields" not in r.headers


async def test_openai_endpoints_not_served_are_404_not_an_id(flexserv_openai: Any) -> None:
    """``/v1/responses/{id}`` does not take ``input_tokens`` or ``compact`` for an id (a 405)."""
    for call, says in [
        (flexserv_openai.responses.input_tokens.count(model="fake-model", input="x"), "/tokenize"),
        (flexserv_openai.responses.compact(model="fake-model", input="x"), "compacting"),
    ]:
        with pytest.raises(openai.NotFoundError) as info:
            await call
        assert says in info.value.body["message"] and info.value.body["code"] == "not_found"
    assert (await flexserv_openai.responses.create(model="fake-model", input="x")).status == "completed"


async def test_bookkeeping_parameters_are_accepted(flexserv_openai: Any) -> None:
    raw = await flexserv_openai.responses.with_raw_response.create(
        model="fake-model",
        input="x",
        user="u1",
        service_tier="auto",
        prompt_cache_key="k",
        safety_identifier="s",
        background=False,
        include=[],
        extra_body={"prompt_cache_options": {"mode": "explicit"}, "reasoning": {"context": "current_turn"}},
    )
    assert "x-flexserv-ignored-fields" not in raw.headers  # accepted as OpenAI's, not dropped as unknown
    r = raw.parse()
    assert r.status == "completed" and r.user == "u1"


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        (
            # a text-only model: the 400 names the image part
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]},
            "input[0].content[0]",
        ),
        ({"input": [{"type": "web_search_call", "id": "x"}]}, "input[0].type"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "x", "max_output_tokens": 5000}, "input"),
        ({"input": "x", "temperature": 3}, "temperature"),
        ({"input": []}, "input"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ],
)
async def test_bad_requests_are_400_with_param(flexserv_openai: Any, kwargs: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await flexserv_openai.responses.create(model="fake-model", **kwargs)
    assert info.value.body["param"] == param, info.value.body


@pytest.mark.parametrize(
    ("item", "param", "code"),
    [
        # chat refuses an empty content list too; nothing would reach the model
        ({"role": "user", "content": []}, "input[0].content", "invalid_value"),
        ({"type": "message", "role": "system", "content": []}, "input[0].content", "invalid_value"),
        ({"role": "user"}, "input[0].content", "missing_required_parameter"),
        # no role and no type: the missing role is the problem, not an item type None
        ({"content": "hi"}, "input[0].role", "missing_required_parameter"),
        ({"type": "message", "content": "hi"}, "input[0].role", "missing_required_parameter"),
    ],
)
async def test_input_messages_without_role_or_content_are_refused(
    flexserv_client: Any, item: dict[str, Any], param: str, code: str
) -> None:
    r = await flexserv_client.post("/v1/responses", json={"model": "fake-model", "input": [item]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == (param, code), error
    assert "None" not in error["message"]


async def test_an_assistant_message_may_have_empty_content(flexserv_client: Any) -> None:
    conversation = [{"role": "assistant", "content": []}, {"role": "user", "content": "hi"}]
    r = await flexserv_client.post("/v1/responses", json={"model": "fake-model", "input": conversation})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("fake", [{"fail_after": 3}], indirect=True)
async def test_failure_mid_stream_sends_error_then_failed(flexserv_openai: Any) -> None:
    stream = await flexserv_openai.responses.create(model="fake-model", input="hi", stream=True)
    events = [event async for event in stream]
    types = [e.type for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-2:] == ["error", "response.failed"]
    assert events[-2].code == "server_error"
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.code == "server_error"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    with pytest.raises(openai.NotFoundError):  # failed responses are not stored
        await flexserv_openai.responses.retrieve(failed.id)


THINKING = "<think>\nLet me see.\n</think>\n\nThe answer."


@pytest.mark.parametrize("fake", [{"script": THINKING, "eos_after": len(THINKING)}], indirect=True)
async def test_reasoning_item_from_think_tags(flexserv_openai: Any) -> None:
    r = await flexserv_openai.responses.create(model="fake-model", input="hi")
    assert [item.type for item in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == "Let me see." and r.output[0].summary == []
    assert r.output_text == "The answer."
    assert r.usage.output_tokens_details.reasoning_tokens == len("Let me see.")

    stream = await flexserv_openai.responses.create(model="fake-model", input="hi", stream=True)
    events = [event async for event in stream]
    types = [e.type for e in events]
    reasoning_deltas = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
    text_deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(reasoning_deltas) == "Let me see." and "".join(text_deltas) == "The answer."
    first_text = types.index("response.output_text.delta")
    assert types[2:4] == ["response.output_item.added", "response.content_part.added"]
    assert types[first_text - 5 : first_text] == [
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert [e.output_index for e in events if e.type == "response.output_item.done"] == [0, 1]
    final = events[-1].response
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.output[0].content[0].text == "Let me see." and final.output_text == "The answer."


@pytest.mark.parametrize("fake", [{"script": THINKING, "eos_after": len(THINKING)}], indirect=True)
async def test_continuation_leaves_reasoning_out(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    """The next turn gets the answer as the assistant message, not the reasoning."""
    r = await flexserv_openai.responses.create(model="fake-model", input="hi")
    await flexserv_openai.responses.create(model="fake-model", input="more", previous_response_id=r.id)
    assert fake.last_prompt == "user: hi\nassistant: The answer.\nuser: more\nassistant: "


class TestStoreLimitsFromSettings:
    @pytest.fixture
    def flexserv_settings(self) -> dict[str, Any]:
        return {"responses_store_max_items": 2}

    async def test_oldest_is_evicted(self, flexserv_openai: Any) -> None:
        ids = [(await flexserv_openai.responses.create(model="fake-model", input=str(i))).id for i in range(3)]
        with pytest.raises(openai.NotFoundError):
            await flexserv_openai.responses.retrieve(ids[0])
        assert [(await flexserv_openai.responses.retrieve(i)).id for i in ids[1:]] == ids[1:]


class TestAResponseTheStoreRefuses:
    """The store keeps at most 1 KiB: a longer response is generated, then refused."""

    @pytest.fixture
    def flexserv_settings(self) -> dict[str, Any]:
        return {"responses_store_max_bytes": 1024}

    async def test_a_stream_ends_with_error_then_failed(self, flexserv_openai: Any) -> None:
        stream = await flexserv_openai.responses.create(
            model="fake-model", input="hi", max_output_tokens=1200, stream=True
        )
        events = [event async for event in stream]
        types = [e.type for e in events]
        assert types[-3:] == ["response.output_item.done", "error", "response.failed"], types[-4:]
        assert events[-2].code == "payload_too_large"
        failed = events[-1].response
        assert failed.status == "failed" and failed.error.code == "payload_too_large"
        assert failed.output_text == events[-3].item.content[0].text  # the output it generated
        assert [e.sequence_number for e in events] == list(range(len(events)))
        with pytest.raises(openai.NotFoundError):
            await flexserv_openai.responses.retrieve(failed.id)
        # without stream, the same response is the same error
        with pytest.raises(openai.APIStatusError) as refused:
            await flexserv_openai.responses.create(model="fake-model", input="hi", max_output_tokens=1200)
        assert refused.value.code == "payload_too_large"
