"""Sampled tokens -> the two logprobs shapes of OpenAI's API.

A token's ``token`` string is the text it added to the output, so joining the
tokens of a choice gives its text (a token that completes a multi-byte character
carries the character; the one before it carries ``""``). When a stop string
begins inside a token, that token is still reported, whole: the joined tokens then
run on past the text into the stop string.
"""

from __future__ import annotations

from collections.abc import Sequence

from flexserv_core.api.text_generation import SampledToken
from flexserv_core.api.text_schemas import ChoiceLogprobs, CompletionLogprobs, TokenLogprob, TopLogprobEntry


def _utf8(text: str) -> list[int]:
    return list(text.encode("utf-8", errors="surrogatepass"))


def chat_logprobs(tokens: Sequence[SampledToken]) -> ChoiceLogprobs:
    """``choices[].logprobs`` of a chat completion (or of one chunk)."""
    return ChoiceLogprobs(
        content=[
            TokenLogprob(
                token=tok.text,
                logprob=tok.logprob,
                bytes=_utf8(tok.text),
                top_logprobs=[
                    TopLogprobEntry(token=alt.token, logprob=alt.logprob, bytes=_utf8(alt.token)) for alt in tok.top
                ],
            )
            for tok in tokens
        ]
    )


def completion_logprobs(tokens: Sequence[SampledToken], *, offset: int, top: int) -> CompletionLogprobs:
    """``choices[].logprobs`` of a completion; ``offset`` is where the generated text
    starts in the choice's text (the echoed prompt's length); ``top`` is the
    request's ``logprobs``."""
    text_offset = [offset + tok.offset for tok in tokens]
    return CompletionLogprobs(
        tokens=[tok.text for tok in tokens],
        token_logprobs=[tok.logprob for tok in tokens],
        top_logprobs=[_top_with_sampled(tok) for tok in tokens] if top > 0 else None,
        text_offset=text_offset,
    )


def _top_with_sampled(tok: SampledToken) -> dict[str, float]:
    """The legacy API's alternatives always hold the sampled token too (up to
    ``logprobs + 1`` entries, as OpenAI documents); sampling at a temperature can
    pick a token outside the top ``logprobs``."""
    entries = {alt.token: alt.logprob for alt in tok.top}
    if tok.logprob is not None:
        entries.setdefault(tok.text, tok.logprob)
    return entries
