"""Typed per-server and per-request state for plugins, in the manner of pytest's stash.

A plugin creates a module-level key once and uses it wherever it keeps state::

    MONITOR_KEY = StashKey[Monitor]()

    server.state[MONITOR_KEY] = Monitor(...)
    monitor = server.state[MONITOR_KEY]  # typed Monitor, no cast
    counters = server.state.get_or_create(COUNTERS_KEY, Counters)

Keys are compared by identity, so two plugins can never clash by picking the same name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast, overload

T = TypeVar("T")
D = TypeVar("D")

__all__ = ["Stash", "StashKey"]


class StashKey(Generic[T]):
    """A key into a :class:`Stash`; its type parameter is the type of the value."""

    __slots__ = ("name",)

    def __init__(self, name: str = "") -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"StashKey({self.name!r})" if self.name else f"<StashKey at {id(self):#x}>"


class Stash:
    """A mapping from :class:`StashKey` to values of the key's type.

    Not a ``dict`` on purpose: only ``StashKey`` objects index it, so state is typed
    and private to whoever holds the key. Item access is atomic under the GIL, and
    :meth:`setdefault` is how concurrent first uses agree on one value.
    """

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: dict[StashKey[Any], object] = {}

    def __setitem__(self, key: StashKey[T], value: T) -> None:
        self._data[_checked(key)] = value

    def __getitem__(self, key: StashKey[T]) -> T:
        return cast(T, self._data[_checked(key)])

    @overload
    def get(self, key: StashKey[T]) -> T | None: ...
    @overload
    def get(self, key: StashKey[T], default: D) -> T | D: ...
    def get(self, key: StashKey[T], default: object = None) -> object:
        try:
            return self[key]
        except KeyError:
            return default

    def setdefault(self, key: StashKey[T], default: T) -> T:
        """The value stored under ``key``, storing ``default`` first if there is none."""
        return cast(T, self._data.setdefault(_checked(key), default))

    def get_or_create(self, key: StashKey[T], factory: Callable[[], T]) -> T:
        """The value stored under ``key``, made by ``factory`` and stored first if there
        is none. Concurrent first uses may each call ``factory``; all get the one value
        that was stored."""
        found = self._data.get(_checked(key))
        return cast(T, found) if found is not None else self.setdefault(key, factory())

    def pop(self, key: StashKey[T], *default: T) -> T:
        return cast(T, self._data.pop(_checked(key), *default))

    def __delitem__(self, key: StashKey[T]) -> None:
        del self._data[_checked(key)]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Stash({len(self._data)} item(s))"


def _checked(key: StashKey[T]) -> StashKey[T]:
    if not isinstance(key, StashKey):
        raise TypeError(f"a Stash is indexed by StashKey objects, not {type(key).__name__} ({key!r})")
    return key
