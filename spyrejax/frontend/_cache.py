"""The lowerings ``spyrejax.jit`` keeps, shared by function as ``jax.jit`` shares them.

``jax.jit`` caches by the function's identity: ``jax.jit(f)(x)`` written inline in a
loop traces ``f`` once. So does ``spyrejax.jit``: every :class:`SpyreJit` of the same
function object and the same static and donated arguments shares one per-signature
cache (:func:`signature_cache`), so a new ``spyrejax.jit(f)`` reuses ``f``'s
lowerings. A different function object is a miss, as it is for ``jax.jit``; the
signature itself holds the JAX configuration tracing depends on (x64, dtype
promotion...).

The function is held weakly: its entry goes at the next use of the cache after it
dies (not from the collector's callback, which may interrupt an iteration of the
cache). A bound method is keyed by its function and its object, which Python compares
it by, so ``spyrejax.jit(obj.f)`` in a loop hits too. Functions that cannot be weakly
referenced get a cache of their own. Both levels are least-recently-used caches of
bounded size, and ``jax.clear_caches()`` clears them with JAX's own.
"""

from __future__ import annotations

import types
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from .._jax import register_cache

__all__ = ["MAX_FUNCTIONS", "MAX_SIGNATURES", "Lru", "signature_cache"]

MAX_FUNCTIONS = 256
"""Functions whose lowerings are kept (least recently used first out)."""

MAX_SIGNATURES = 64
"""Input signatures kept per function (least recently used first out)."""


class Lru[K: Hashable, V]:
    """A dict of bounded size that forgets its least recently used entry first.

    With ``remember_last``, the entry last found is also held aside and compared
    first: a function called again and again with one signature finds it by one
    equality test (its elements mostly the same objects), not two hashes of the key
    (one to find it, one to mark it recently used). While it is found that way it is
    not marked recently used again, so it may leave the dict meanwhile; it stays until
    another entry is found, or it is popped or cleared.
    """

    def __init__(self, maxsize: int, remember_last: bool = False) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[K, V] = OrderedDict()
        self._remember = remember_last
        self._last: tuple[K, V] | None = None

    def get(self, key: K) -> V | None:
        """The value for ``key`` (now the most recently used), or None."""
        last = self._last
        if last is not None and last[0] == key:
            return last[1]
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
            if self._remember:
                self._last = (key, value)
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
        if self._last is not None and self._last[0] == key:
            self._last = None

    def __iter__(self) -> Iterator[K]:
        """The keys, least recently used first (a copy: entries may be popped meanwhile)."""
        return iter(list(self._data))

    def clear(self) -> None:
        """Forget every entry."""
        self._data.clear()
        self._last = None

    def __len__(self) -> int:
        return len(self._data)


class _FunKey:
    """A function's identity, held weakly (a bound method's: its function and object)."""

    __slots__ = ("__weakref__", "_hash", "_refs")

    def __init__(self, fun: Callable[..., Any], on_dead: Callable[[Any], None]) -> None:
        parts = (fun.__func__, fun.__self__) if isinstance(fun, types.MethodType) else (fun,)
        self._refs = tuple(weakref.ref(p, on_dead) for p in parts)  # TypeError if it cannot
        self._hash = hash(tuple(id(p) for p in parts))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, _FunKey) or len(self._refs) != len(other._refs):
            return False
        pairs = [(a(), b()) for a, b in zip(self._refs, other._refs, strict=True)]
        return all(a is not None and a is b for a, b in pairs)


_FUNCTIONS: Lru[tuple[_FunKey, Hashable], Lru[Any, Any]] = Lru(MAX_FUNCTIONS)
_SIGNATURE_CACHES: weakref.WeakSet[Lru[Any, Any]] = weakref.WeakSet()  # held by SpyreJits too
_DEAD: list[_FunKey] = []
"""Keys whose function has died, forgotten at the next use of :data:`_FUNCTIONS`.

A weakref callback runs whenever the collector does, which may be in the middle of an
iteration over ``_FUNCTIONS``: it only appends here (never mutating the dict it might
interrupt), and :func:`_purge` forgets the keys outside any iteration.
"""


class _Registered:
    """Every cache of this module, as ``jax.clear_caches()`` sees it."""

    def cache_clear(self) -> None:
        """Forget every lowering (functions keep their, now empty, shared caches)."""
        for cache in list(_SIGNATURE_CACHES):
            cache.clear()

    def cache_info(self) -> tuple[int, int]:
        _purge()
        return len(_FUNCTIONS), MAX_FUNCTIONS

    def cache_keys(self) -> list[Any]:
        _purge()
        return list(_FUNCTIONS)


_REGISTERED = _Registered()
register_cache(_REGISTERED, "spyrejax.jit lowerings")


def _new_signature_cache() -> Lru[Any, Any]:
    cache: Lru[Any, Any] = Lru(MAX_SIGNATURES, remember_last=True)
    _SIGNATURE_CACHES.add(cache)
    return cache


def _purge() -> None:
    """Forget the entries of every function that has died since the last purge."""
    while _DEAD:
        keys = _DEAD[:]
        del _DEAD[: len(keys)]  # a key appended meanwhile stays for the next round
        dead = {id(key) for key in keys}  # alive: _FUNCTIONS holds them
        for full in [full for full in _FUNCTIONS if id(full[0]) in dead]:
            _FUNCTIONS.pop(full)


def signature_cache(fun: Callable[..., Any], config: Hashable) -> Lru[Any, Any]:
    """The per-signature cache of ``fun`` jitted with ``config`` (its static arguments).

    The same object for every call with the same function object and config while the
    function lives (and is among the :data:`MAX_FUNCTIONS` most recently used).
    """
    holder: list[weakref.ref[_FunKey]] = []  # weakly: a key used for a lookup only goes

    def on_dead(_: Any) -> None:
        key = holder[0]() if holder else None
        if key is not None:
            _DEAD.append(key)  # only that: see _DEAD

    try:
        key = _FunKey(fun, on_dead)
    except TypeError:  # not weakly referenceable: no sharing
        return _new_signature_cache()
    holder.append(weakref.ref(key))
    _purge()
    cache = _FUNCTIONS.get((key, config))
    if cache is None:
        cache = _new_signature_cache()
        _FUNCTIONS.put((key, config), cache)
    return cache
