"""The lowerings ``spyrejax.jit`` keeps: least-recently-used caches of bounded size."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator

__all__ = ["MAX_SIGNATURES", "Lru"]

MAX_SIGNATURES = 64
"""Input signatures kept per function (least recently used first out)."""


class Lru[K: Hashable, V]:
    """A dict of bounded size that forgets its least recently used entry first."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The value for ``key`` (now the most recently used), or None."""
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        """Store ``value``; forget the least recently used entry beyond ``maxsize``."""
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def pop(self, key: K) -> None:
        """Forget ``key`` if it is there."""
        self._data.pop(key, None)

    def __iter__(self) -> Iterator[K]:
        """The keys, least recently used first (a copy: entries may be popped meanwhile)."""
        return iter(list(self._data))

    def __len__(self) -> int:
        return len(self._data)
