"""A least-recently-used cache bounded by bytes: the worker's inputs, references and baselines.

Values are anything; the caller says how many bytes each holds. When a new entry would push the
total over the budget, the least recently used entries go first (a single entry larger than the
budget is still kept, alone, so the job in hand can run). Pure Python: tested on the CPU.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class ByteLRU:
    def __init__(self, budget_bytes: int, on_evict: Callable[[Hashable, Any], None] | None = None):
        self.budget = int(budget_bytes)
        self.on_evict = on_evict
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.total = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def keys(self) -> list[Hashable]:
        return list(self._items)

    def get(self, key: Hashable, default: Any = None) -> Any:
        if key not in self._items:
            self.misses += 1
            return default
        self.hits += 1
        self._items.move_to_end(key)
        return self._items[key][0]

    def peek(self, key: Hashable, default: Any = None) -> Any:
        """The value without counting a hit or changing the order (an audit reads every entry)."""
        return self._items[key][0] if key in self._items else default

    def put(self, key: Hashable, value: Any, nbytes: int) -> None:
        if key in self._items:
            self._drop(key)
        self._make_room(int(nbytes))
        self._items[key] = (value, int(nbytes))
        self.total += int(nbytes)

    def get_or_make(self, key: Hashable, make: Callable[[], tuple[Any, int]]) -> Any:
        if key in self._items:
            return self.get(key)
        self.misses += 1
        value, nbytes = make()
        self.put(key, value, nbytes)
        return value

    def drop(self, key: Hashable) -> None:
        """Forget one entry (on_evict runs for it); no error when it is not there."""
        if key in self._items:
            self._drop(key)

    def clear(self) -> None:
        for key in list(self._items):
            self._drop(key)

    def _make_room(self, nbytes: int) -> None:
        while self._items and self.total + nbytes > self.budget:
            oldest = next(iter(self._items))
            self._drop(oldest)
            self.evictions += 1

    def _drop(self, key: Hashable) -> None:
        value, nbytes = self._items.pop(key)
        self.total -= nbytes
        if self.on_evict:
            self.on_evict(key, value)

    def stats(self) -> dict:
        return {"entries": len(self), "bytes": self.total, "budget": self.budget, "hits": self.hits,
                "misses": self.misses, "evictions": self.evictions}
