"""The stop-string matcher on its own: any split of the text gives the same output."""

from __future__ import annotations

import random

import pytest

from flexserv_core.api.stop import StopMatcher


def run(pieces: list[str], stops: list[str]) -> tuple[list[str], bool]:
    matcher = StopMatcher(stops)
    out = [matcher.feed(p) for p in pieces]
    if not matcher.stopped:
        out.append(matcher.flush())
    return out, matcher.stopped


def reference(text: str, stops: list[str]) -> tuple[str, bool]:
    hits = [text.find(s) for s in stops if s in text]
    return (text[: min(hits)], True) if hits else (text, False)


@pytest.mark.parametrize(
    ("text", "stops"),
    [
        ("The quick brown fox", ["fox"]),
        ("aaab", ["aab"]),  # the match starts inside a held partial match
        ("abcabd", ["abd", "cab"]),  # earliest match wins, not the first listed
        ("no stop here", ["xyz"]),
        ("ends with a partial sto", ["stop"]),  # held text is released at the end
        ("<|im_end|> and more", ["<|im_end|>"]),
        ("héllo wörld", ["wö"]),
        ("", ["x"]),
    ],
)
def test_every_split_gives_the_reference_answer(text: str, stops: list[str]) -> None:
    expected, stopped = reference(text, stops)
    rng = random.Random(0)
    splits = [list(text), [text]]
    for _ in range(30):
        cuts = sorted(rng.sample(range(len(text) + 1), k=min(len(text), rng.randint(0, 6))))
        splits.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)])
    for pieces in splits:
        out, did_stop = run(pieces, stops)
        assert "".join(out) == expected, pieces
        assert did_stop == stopped


def test_partial_match_is_held_until_decided() -> None:
    m = StopMatcher(["</end>"])
    assert m.feed("ok <") == "ok "
    assert m.feed("/e") == ""
    assert m.feed("x") == "</ex"
    assert m.feed("</en") == ""
    assert m.feed("d>tail") == ""
    assert m.stopped and m.released == len("ok </ex")
    assert m.feed("more") == "" and m.flush() == ""


def test_no_stops_passes_text_through() -> None:
    m = StopMatcher([])
    assert m.feed("abc") == "abc" and m.flush() == "" and not m.stopped
