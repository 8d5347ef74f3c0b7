"""Thread limits for the BLAS pools during long numerical runs (threadpoolctl, if installed)."""

from __future__ import annotations

import contextlib

__all__ = ["blas_limit"]


def blas_limit(threads: int | None):
    """Limit the BLAS thread pools to ``threads`` (threadpoolctl, if installed)."""
    if threads is None:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional
        return contextlib.nullcontext()
    return threadpool_limits(limits=threads, user_api="blas")
