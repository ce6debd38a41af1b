"""The Responses API's parts that need no server: reasoning splitting, streamed items and the store."""

from __future__ import annotations

import asyncio
import itertools
import json

import msgspec
import pytest
from flexserv_responses.events import EventWriter, OutputStreamer
from flexserv_responses.output import output_items
from flexserv_responses.reasoning import ReasoningSplitter, prompt_opens_reasoning, split_reasoning
from flexserv_responses.request import responses_param
from flexserv_responses.schemas import (
    FunctionCall,
    InputMessage,
    InputText,
    OutputItem,
    OutputMessage,
    OutputText,
    Response,
    TextConfig,
)
from flexserv_responses.store import ResponseStore, StoredResponse
from flexserv_state import CollectionLimits, ManualClock, MemoryBackend, StateStore

from flexserv_core import ChatCompletionRequest, InvalidRequest, ModelSpec, NotFound, ToolPlan
from flexserv_core.testing import FakeTextModel, make_app


def pieces_of(text: str, size: int, *, inside: bool = False) -> tuple[str, str]:
    splitter = ReasoningSplitter(inside=inside)
    out = []
    for start in range(0, len(text), size):
        out += splitter.feed(text[start : start + size])
    out += splitter.finish()
    reasoning = "".join(t for k, t in out if k == "reasoning")
    answer = "".join(t for k, t in out if k == "text")
    # pieces of one kind come in one run: reasoning first, then the answer
    kinds = [k for k, _ in itertools.groupby(k for k, _ in out)]
    assert kinds in ([], ["reasoning"], ["text"], ["reasoning", "text"])
    return reasoning, answer


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100])
@pytest.mark.parametrize(
    ("text", "inside", "expected"),
    [
        ("<think>\nplan a  b\n</think>\n\nanswer <b>", False, ("plan a  b", "answer <b>")),
        ("  <think>x</think>y", False, ("x", "y")),
        ("plain answer", False, ("", "plain answer")),
        ("  leading space kept", False, ("", "  leading space kept")),
        ("<thin", False, ("", "<thin")),
        ("answer then <think>no</think>", False, ("", "answer then <think>no</think>")),
        ("\nalready thinking</think> done", True, ("already thinking", "done")),
        ("cut off while think", True, ("cut off while think", "")),
        ("<think>never closed </thi", False, ("never closed </thi", "")),
        ("</think>", True, ("", "")),
    ],
)
def test_splitter_any_chunking(text: str, inside: bool, expected: tuple[str, str], size: int) -> None:
    assert pieces_of(text, size, inside=inside) == expected
    assert split_reasoning(text, inside=inside) == expected


def test_prompt_opens_reasoning_reads_the_prompt_tail() -> None:
    model = FakeTextModel(ModelSpec(name="m", source="fake://", backend="fake"))
    assert prompt_opens_reasoning(model, model.encode("user: q\nassistant: <think>\n"))
    assert not prompt_opens_reasoning(model, model.encode("user: q\nassistant: <think></think>\n"))
    assert not prompt_opens_reasoning(model, model.encode("user: q\nassistant: "))
    # an open tag far back in the prompt is history, not the generation prompt
    assert not prompt_opens_reasoning(model, model.encode("<think>" + "x" * 100))


def entry(ident: str, text: str = "hi") -> StoredResponse:
    message = OutputMessage(id="msg_" + ident, status="completed", role="assistant", content=[OutputText(text=text)])
    response = Response(id=ident, created_at=0, status="completed", model="m", text=TextConfig(), output=[message])
    history = ({"role": "user", "content": "q"}, {"role": "assistant", "content": text})
    items = (InputMessage(id="in_" + ident, role="user", content=[InputText(text="q")]),)
    return StoredResponse(response=response, history=history, input_items=items)


def responses_store(owner: str | None = None, **limits: float) -> tuple[ResponseStore, ManualClock]:
    clock = ManualClock()
    state = StateStore(MemoryBackend(), clock=clock)
    collection = state.collection("responses", CollectionLimits(**limits))  # type: ignore[arg-type]
    return ResponseStore(collection, owner, enabled=limits.get("max_items") != 0), clock


async def test_a_stored_response_comes_back_whole() -> None:
    store, _ = responses_store(max_items=3)
    await store.put(entry("a", "the answer"))
    got = await store.get("a")
    assert got == entry("a", "the answer")


async def test_store_evicts_the_oldest_beyond_its_size() -> None:
    store, clock = responses_store(max_items=3)
    for ident in "abcd":
        await store.put(entry(ident))
        clock.advance(1)
    assert await store.get("a") is None
    assert [x for x in "bcd" if await store.get(x) is not None] == ["b", "c", "d"]


async def test_store_expires_by_age() -> None:
    store, clock = responses_store(max_items=10, max_age=60)
    await store.put(entry("old"))
    clock.advance(30)
    await store.put(entry("new"))
    assert await store.get("old") is not None  # a read does not extend a response's life
    clock.advance(31)
    assert await store.get("old") is None and await store.get("new") is not None
    clock.advance(30)
    assert await store.get("new") is None


async def test_store_of_size_zero_keeps_nothing_and_delete() -> None:
    store, _ = responses_store(max_items=0)
    await store.put(entry("a"))
    assert await store.get("a") is None
    store, _ = responses_store(max_items=2)
    await store.put(entry("a"))
    assert await store.delete("a") and not await store.delete("a") and await store.get("a") is None
    with pytest.raises(NotFound) as caught:
        await store.previous("a")
    assert caught.value.code == "previous_response_not_found"
    assert await store.previous(None) is None


async def test_each_owner_sees_only_its_responses() -> None:
    alice, _ = responses_store(owner="key-alice", max_items=5)
    await alice.put(entry("a"))
    bob = ResponseStore(alice.collection, "key-bob")
    assert await bob.get("a") is None and not await bob.delete("a")
    assert await alice.get("a") is not None


async def test_store_under_concurrent_writers() -> None:
    store, _ = responses_store(max_items=50)

    async def writer(prefix: str) -> None:
        for i in range(200):
            await store.put(entry(f"{prefix}{i}"))
            await store.get(f"{prefix}{i // 2}")

    await asyncio.gather(*(writer(p) for p in "abcd"))
    assert len((await store.collection.list(owner=None, limit=100)).records) == 50


CALL = '<tool_call>\n{"name": "f", "arguments": {"x": "a long enough value to need fragments"}}\n</tool_call>'


def _plan() -> ToolPlan:
    """A plan for one function tool, made by the server's tool calling (the fake
    model's template does not know tools: the hermes parser, the fallback prompt)."""
    tool_calling = make_app(["tool-parsers"]).state.flexserv.tool_calling
    assert tool_calling is not None
    body = msgspec.convert(
        {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}]},
        ChatCompletionRequest,
    )
    spec = ModelSpec(name="m", source="fake://", backend="fake")
    plan = tool_calling.plan(body, FakeTextModel(spec), spec, None)
    assert plan is not None
    return plan


def _shape(items: list[OutputItem]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for item in items:
        if isinstance(item, FunctionCall):
            out.append(("function_call", item.name, item.arguments, item.status))
        elif isinstance(item, OutputMessage):
            out.append(("message", "".join(p.text for p in item.content), item.status))
        else:
            out.append(("reasoning",))
    return out


@pytest.mark.parametrize("size", [1, 3, 16, 1000])
@pytest.mark.parametrize(
    ("text", "types"),
    [
        (CALL, ["function_call"]),
        (f"Sure.\n{CALL}", ["message", "function_call"]),
        (f"{CALL}\nafter", ["function_call", "message"]),  # the model's order
        (f"{CALL}\n{CALL}", ["function_call", "function_call"]),
        (f"<think>hm</think>\n{CALL}", ["reasoning", "function_call"]),
        ("plain text  \n", ["message"]),
        ("<tool_call> not json", ["message"]),
        ("", ["message"]),
    ],
)
def test_streamed_items_equal_the_whole_output(text: str, types: list[str], size: int) -> None:
    """Whatever the chunking, the streamed items are the non-streamed ones, and each
    call's argument deltas join to its arguments."""
    whole = output_items(text, inside=False, status="completed", tools=_plan())
    assert [s[0] for s in _shape(whole)] == types
    streamer = OutputStreamer(EventWriter(), inside=False, tools=_plan())
    raw: list[bytes] = []
    for start in range(0, len(text), size):
        raw += streamer.feed(text[start : start + size])
    raw += streamer.finish("completed")
    assert _shape(streamer.items) == _shape(whole)
    events = [json.loads(chunk.split(b"\ndata: ", 1)[1]) for chunk in raw]
    for index, item in enumerate(streamer.items):
        if isinstance(item, FunctionCall):
            deltas = [
                e["delta"] for e in events if e["type"].endswith("arguments.delta") and e["output_index"] == index
            ]
            assert "".join(deltas) == item.arguments
            if size < len(item.arguments):  # arguments stream as they arrive, not whole at the end
                assert len(deltas) > 1


def test_errors_name_the_responses_paths_in_param_and_message() -> None:
    """The chat path's error, message included, speaks of ``input``, also where the
    message quotes a path deeper than ``param``."""
    deeper = InvalidRequest(
        "'messages[0].content[1].file' is neither a PDF nor an image.", param="messages[0].content[1]"
    )
    renamed = responses_param(deeper)
    assert renamed.param == "input[0].content[1]"
    assert renamed.message == "'input[0].content[1].file' is neither a PDF nor an image."
    schema = responses_param(
        InvalidRequest("'response_format.json_schema' is bad.", param="response_format.json_schema")
    )
    assert (schema.param, schema.message) == ("text.format", "'text.format' is bad.")
