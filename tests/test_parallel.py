"""``dpexplorer.core.parallel.blas_limit``: the BLAS thread pools limited within, restored after."""

from __future__ import annotations

import contextlib

import numpy as np  # noqa: F401  (loads the BLAS library threadpoolctl reports)
import pytest

from dpexplorer.core.parallel import blas_limit


def test_no_limit_is_a_null_context():
    assert isinstance(blas_limit(None), contextlib.nullcontext)


def test_the_blas_pools_are_limited_within_and_restored_after():
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads():
        return [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]

    before = blas_threads()
    if not before:
        pytest.skip("no BLAS thread pool found by threadpoolctl")
    with blas_limit(1):
        assert blas_threads() == [1] * len(before)
    assert blas_threads() == before
