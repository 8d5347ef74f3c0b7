"""Small timing helpers shared by the benchmarks (wall and CPU seconds)."""

from __future__ import annotations

import time


def best_of(fn, repeat: int = 3):
    """``(value, best wall seconds)`` of ``repeat`` calls of ``fn()``."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return value, min(times)


def timed(fn):
    """``(value, wall seconds, CPU seconds of this process)`` of one call of ``fn()``."""
    t0, c0 = time.perf_counter(), time.process_time()
    value = fn()
    return value, time.perf_counter() - t0, time.process_time() - c0
