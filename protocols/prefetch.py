"""Background prefetch: compute `fn(key)` for a sequence of keys in worker threads, ahead of the
consumer, and yield the results in key order.

`prefetch_map(fn, keys, depth=d, workers=w)` keeps at most `d` + 1 results in flight (submitted but not
yet handed over: a bounded window), computed by `w` threads. Results come back in the order of `keys`
whatever the number of workers, so when `fn(key)` depends on `key` only (a batch is a function of
(seed, epoch, batch index)) the output is identical to `map(fn, keys)`. An exception raised by
`fn(key)` is raised in the consumer at that key's position. When the consumer stops early (breaks
out of its loop, or the generator is closed or collected), pending work is cancelled and the workers
are joined.

Batch assembly is numpy gathers, ufuncs and torch conversions, which release the GIL, so the
workers overlap with the model's compute and with each other.
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
