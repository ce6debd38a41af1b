"""Streamed Responses events, in OpenAI's order, each with ``sequence_number``.

Per output item: ``response.output_item.added``, ``response.content_part.added``,
the deltas (``response.reasoning_text.delta`` or ``response.output_text.delta``),
their ``...done``, ``response.content_part.done``, ``response.output_item.done``.
A function call (tools) is an item of its own, after the message: its
``response.output_item.added`` (``arguments`` empty), the
``response.function_call_arguments.delta`` fragments as the chat path's tool
plan streams them (:meth:`flexserv_core.ToolPlan.streamer`),
``response.function_call_arguments.done``, ``response.output_item.done``.
Around them: ``response.created`` and ``response.in_progress`` first,
``response.completed`` (or ``response.incomplete``) last; a failure sends
``error`` then ``response.failed``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from flexserv_core import ToolCallDelta, ToolPlan
from flexserv_responses.items import item_id
from flexserv_responses.reasoning import Kind, ReasoningSplitter
from flexserv_responses.schemas import (
    FunctionCall,
    OutputItem,
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningText,
    Response,
    ResponseStatus,
)


class EventWriter:
    """Numbers events and writes them as SSE (``event:`` and ``data:`` lines)."""

    def __init__(self) -> None:
        self.sequence = 0

    def __call__(self, type_: str, **fields: Any) -> bytes:
        payload = msgspec.json.encode({"type": type_, "sequence_number": self.sequence, **fields})
        self.sequence += 1
        return b"event: " + type_.encode() + b"\ndata: " + payload + b"\n\n"

    def lifecycle(self, type_: str, response: Response) -> bytes:
        return self(type_, response=response)

    def error(self, message: str, code: str | None, param: str | None) -> bytes:
        return self("error", code=code, message=message, param=param)


class OutputStreamer:
    """Turns generated text into item events; keeps the finished items for the
    final ``response`` object."""

    def __init__(self, write: EventWriter, *, inside: bool, tools: ToolPlan | None = None) -> None:
        self.write = write
        self.splitter = ReasoningSplitter(inside=inside)
        self.tools = tools.streamer() if tools is not None and tools.parses else None
        self.items: list[OutputItem] = []
        self._kind: Kind | None = None
        self._id = ""
        self._text: list[str] = []
        #: Trailing whitespace of the answer, held back: before a call it is dropped
        self._held = ""
        self._call: FunctionCall | None = None
        self._call_index = -1
        self._arguments: list[str] = []

    def feed(self, text: str) -> list[bytes]:
        out: list[bytes] = []
        for kind, chunk in self.splitter.feed(text):
            out += self._route(kind, chunk)
        return out

    def finish(self, status: ResponseStatus) -> list[bytes]:
        """Close what is open (the answer with ``status``), then the function calls;
        an empty answer item when nothing was generated."""
        out: list[bytes] = []
        for kind, chunk in self.splitter.finish():
            out += self._route(kind, chunk)
        if self.tools is not None:
            out += self._tool_pieces(self.tools.finish())
            if self._held and not self.tools.calls:
                out += self._piece("text", self._held)
            out += self._end_call(status)
        if self._kind is None and not self.items:
            out += self._open("text")
        out += self._close(status)
        return out

    def _route(self, kind: Kind, chunk: str) -> list[bytes]:
        if kind == "text" and self.tools is not None:
            return self._tool_pieces(self.tools.feed(chunk))
        return self._piece(kind, chunk)

    def _tool_pieces(self, pieces: list[str | ToolCallDelta]) -> list[bytes]:
        """Answer text and tool-call deltas, in the order the model wrote them: the
        first delta of a call closes the open message item, text after a call
        completes the call."""
        out: list[bytes] = []
        for piece in pieces:
            if isinstance(piece, str):
                out += self._end_call("completed")
                out += self._answer(piece)
                continue
            if self._call is None and self._kind is not None:
                self._held = ""  # whitespace before a call is not part of the answer
                out += self._close("completed")
            out += self._calls([piece])
        return out

    def _answer(self, text: str) -> list[bytes]:
        """Answer text beside possible calls: sent up to its trailing whitespace."""
        text = self._held + text
        sent = text.rstrip()
        self._held = text[len(sent) :]
        return self._piece("text", sent) if sent else []

    def _calls(self, deltas: list[ToolCallDelta]) -> list[bytes]:
        """Tool-call deltas -> function_call item events (a delta with an ``id`` or a
        new ``index`` starts the next call)."""
        out: list[bytes] = []
        for delta in deltas:
            function = delta.function
            if delta.id is not None or delta.index != self._call_index:
                out += self._end_call("completed")
                self._call_index, self._arguments = delta.index, []
                self._call = FunctionCall(
                    id=item_id("fc"),
                    call_id=delta.id or "",
                    name=(function.name if function is not None else None) or "",
                    arguments="",
                    status="in_progress",
                )
                out.append(self.write("response.output_item.added", output_index=self.output_index, item=self._call))
            fragment = function.arguments if function is not None else None
            if fragment and self._call is not None:
                self._arguments.append(fragment)
                out.append(
                    self.write(
                        "response.function_call_arguments.delta",
                        item_id=self._call.id,
                        output_index=self.output_index,
                        delta=fragment,
                    )
                )
        return out

    def _end_call(self, status: ResponseStatus) -> list[bytes]:
        call = self._call
        if call is None:
            return []
        arguments, index = "".join(self._arguments), self.output_index
        done = FunctionCall(id=call.id, call_id=call.call_id, name=call.name, arguments=arguments, status=status)
        self._call = None
        self.items.append(done)
        return [
            self.write(
                "response.function_call_arguments.done", item_id=call.id, output_index=index, arguments=arguments
            ),
            self.write("response.output_item.done", output_index=index, item=done),
        ]

    @property
    def output_index(self) -> int:
        return len(self.items)

    def _piece(self, kind: Kind, chunk: str) -> list[bytes]:
        out: list[bytes] = []
        if self._kind != kind:
            out += self._close("completed")
            out += self._open(kind)
        self._text.append(chunk)
        event = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        extra: dict[str, Any] = {} if kind == "reasoning" else {"logprobs": []}
        out.append(
            self.write(event, item_id=self._id, output_index=self.output_index, content_index=0, delta=chunk, **extra)
        )
        return out

    def _open(self, kind: Kind) -> list[bytes]:
        self._kind, self._text = kind, []
        item: OutputItem
        part: OutputText | ReasoningText
        if kind == "reasoning":
            self._id = item_id("rs")
            item, part = ReasoningItem(id=self._id, status="in_progress"), ReasoningText(text="")
        else:
            self._id = item_id("msg")
            item, part = OutputMessage(id=self._id, status="in_progress"), OutputText(text="")
        index = self.output_index
        return [
            self.write("response.output_item.added", output_index=index, item=item),
            self.write("response.content_part.added", item_id=self._id, output_index=index, content_index=0, part=part),
        ]

    def _close(self, status: ResponseStatus) -> list[bytes]:
        if self._kind is None:
            return []
        text, index = "".join(self._text), self.output_index
        item: OutputItem
        if self._kind == "reasoning":
            done = self.write(
                "response.reasoning_text.done", item_id=self._id, output_index=index, content_index=0, text=text
            )
            part: OutputText | ReasoningText = ReasoningText(text=text)
            item = ReasoningItem(id=self._id, content=[ReasoningText(text=text)])
        else:
            done = self.write(
                "response.output_text.done",
                item_id=self._id,
                output_index=index,
                content_index=0,
                text=text,
                logprobs=[],
            )
            part = OutputText(text=text)
            item = OutputMessage(id=self._id, status=status, content=[OutputText(text=text)])
        self._kind = None
        events = [
            done,
            self.write("response.content_part.done", item_id=self._id, output_index=index, content_index=0, part=part),
            self.write("response.output_item.done", output_index=index, item=item),
        ]
        self.items.append(item)
        return events
