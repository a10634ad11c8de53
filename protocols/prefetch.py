"""Background prefetch: `prefetch_map(fn, keys, depth=d, workers=w)` computes `fn(key)` in `w` threads with at most
d + 1 results in flight and yields them in key order, so with `fn(key)` depending on `key` only the output
equals `map(fn, keys)` (the rules: docs/protocols.md, "Batch loader"). Batch assembly (numpy gathers, ufuncs,
torch conversions) releases the GIL, so the workers overlap with the model's compute and with each other.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

K = TypeVar("K")
T = TypeVar("T")


def prefetch_map(fn: Callable[[K], T], keys: Iterable[K], *, depth: int, workers: int = 1) -> Iterator[T]:
    """Yield fn(key) for each key in order, computed up to `depth` keys ahead by `workers` threads
    (`depth` <= 0: no thread, each result is computed when asked for)."""
    if depth <= 0:
        yield from map(fn, keys)
        return
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="recscale-prefetch")
    window: deque[Future] = deque()
    try:
        for key in keys:
            window.append(pool.submit(fn, key))
            if len(window) > depth:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
