"""The naive baseline: one request at a time, ``model.generate`` + ``TextIteratorStreamer``
behind a lock, served as OpenAI-compatible streaming chat completions.

This is what a server without a scheduler does; it exists only to be measured
against. Run: ``python benchmarks/naive_server.py CHECKPOINT_DIR --port 8001``.
Routes: ``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions``
(``stream`` true or false, ``stream_options.include_usage``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import torch
import uvicorn
from litestar import Litestar, get, post
from litestar.response import Response, Stream
from transformers import AutoModelForCausalLM, AutoTokenizer, TextIteratorStreamer


class NaiveServer:
    def __init__(self, checkpoint: str, dtype: str, name: str) -> None:
        self.name = name
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=getattr(torch, dtype))
        self.model.eval()
        self.lock = asyncio.Lock()  # the whole point: one generation at a time

    def _inputs(self, body: dict[str, Any]) -> torch.Tensor:
        ids = self.tokenizer.apply_chat_template(
            body["messages"], add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        return ids["input_ids"]

    async def tokens(self, body: dict[str, Any]) -> AsyncIterator[str]:
        """Text pieces of one generation, produced while holding the lock."""
        async with self.lock:
            input_ids = self._inputs(body)
            streamer = TextIteratorStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=True)
            temperature = float(body.get("temperature") or 0.0)
            kwargs: dict[str, Any] = {
                "input_ids": input_ids,
                "attention_mask": torch.ones_like(input_ids),
                "max_new_tokens": int(body.get("max_tokens") or 64),
                "streamer": streamer,
                "do_sample": temperature > 0,
                "pad_token_id": self.tokenizer.eos_token_id,
            }
            if temperature > 0:
                kwargs["temperature"] = temperature
            thread = threading.Thread(target=self._generate, kwargs=kwargs, daemon=True)
            thread.start()
            iterator = iter(streamer)
            while True:
                piece = await asyncio.to_thread(next, iterator, None)
                if piece is None:
                    break
                if piece:
                    yield piece
            await asyncio.to_thread(thread.join)

    def _generate(self, **kwargs: Any) -> None:
        with torch.inference_mode():
            self.model.generate(**kwargs)

    def count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def build_app(server: NaiveServer) -> Litestar:
    def chunk(ident: str, delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> bytes:
        event = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": server.name,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if usage is None else [],
            "usage": usage,
        }
        return b"data: " + json.dumps(event).encode() + b"\n\n"

    @get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": server.name, "object": "model", "owned_by": "naive"}]}

    @post("/v1/chat/completions", status_code=200)
    async def chat(data: dict[str, Any]) -> Response[Any] | Stream:
        ident = f"chatcmpl-{uuid.uuid4().hex}"
        if not data.get("stream"):
            text = "".join([piece async for piece in server.tokens(data)])
            return Response(
                {
                    "id": ident,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": server.name,
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                    ],
                }
            )
        include_usage = bool((data.get("stream_options") or {}).get("include_usage"))

        async def events() -> AsyncIterator[bytes]:
            yield chunk(ident, {"role": "assistant", "content": ""})
            pieces = []
            async for piece in server.tokens(data):
                pieces.append(piece)
                yield chunk(ident, {"content": piece})
            yield chunk(ident, {}, finish="stop")
            if include_usage:
                tokens = server.count("".join(pieces))
                yield chunk(ident, {}, usage={"prompt_tokens": 0, "completion_tokens": tokens, "total_tokens": tokens})
            yield b"data: [DONE]\n\n"

        return Stream(events(), media_type="text/event-stream")

    return Litestar([health, models, chat])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="A transformers checkpoint directory (or Hub id in the local cache).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--name", default="naive", help="Model id it answers to.")
    args = parser.parse_args()
    server = NaiveServer(args.checkpoint, args.dtype, args.name)
    uvicorn.run(build_app(server), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
