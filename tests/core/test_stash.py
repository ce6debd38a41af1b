"""Stash: typed state keyed by identity, as pytest's stash."""

from __future__ import annotations

import threading

import pytest

from flexserv_core import RequestContext, Stash, StashKey
from flexserv_core.testing import make_app

COUNT = StashKey[int]("count")
NAMES = StashKey[list[str]]("names")


def test_set_get_contains_delete() -> None:
    stash = Stash()
    assert COUNT not in stash and len(stash) == 0
    assert stash.get(COUNT) is None and stash.get(COUNT, 7) == 7
    with pytest.raises(KeyError):
        stash[COUNT]
    stash[COUNT] = 3
    assert COUNT in stash and stash[COUNT] == 3 and stash.get(COUNT, 7) == 3
    del stash[COUNT]
    assert COUNT not in stash
    with pytest.raises(KeyError):
        del stash[COUNT]


def test_keys_are_compared_by_identity_not_name() -> None:
    stash = Stash()
    other = StashKey[int]("count")
    stash[COUNT] = 1
    assert other not in stash
    stash[other] = 2
    assert (stash[COUNT], stash[other]) == (1, 2)


def test_only_stash_keys_index_it() -> None:
    stash = Stash()
    with pytest.raises(TypeError, match="StashKey"):
        stash["count"] = 1  # type: ignore[index]
    assert "count" not in stash


def test_setdefault_gives_one_value_to_racing_threads() -> None:
    stash = Stash()
    seen: list[list[str]] = []
    barrier = threading.Barrier(16)

    def first_use() -> None:
        barrier.wait()
        seen.append(stash.setdefault(NAMES, []))

    threads = [threading.Thread(target=first_use) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 16 and all(s is seen[0] for s in seen)
    assert stash.pop(NAMES) is seen[0] and NAMES not in stash
    assert stash.pop(NAMES, ["gone"]) == ["gone"]


def test_server_and_request_state_are_stashes() -> None:
    server = make_app().state.flexserv
    assert isinstance(server.state, Stash)
    first, second = RequestContext("/v1/chat/completions", server), RequestContext("/v1/chat/completions", server)
    first.state[COUNT] = 1
    assert isinstance(second.state, Stash) and COUNT not in second.state


def test_get_or_create_makes_the_value_once_and_racing_threads_share_it() -> None:
    stash = Stash()
    made: list[list[str]] = []

    def make() -> list[str]:
        made.append([])
        return made[-1]

    first = stash.get_or_create(NAMES, make)
    assert stash.get_or_create(NAMES, make) is first and len(made) == 1

    racing = Stash()
    seen: list[list[str]] = []
    barrier = threading.Barrier(16)

    def first_use() -> None:
        barrier.wait()
        seen.append(racing.get_or_create(NAMES, make))

    threads = [threading.Thread(target=first_use) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(s is seen[0] for s in seen) and racing[NAMES] is seen[0]


def test_each_app_has_its_own_settings_state() -> None:
    first, second = make_app().state.flexserv, make_app().state.flexserv
    first.settings.state[COUNT] = 1
    assert isinstance(second.settings.state, Stash) and COUNT not in second.settings.state
