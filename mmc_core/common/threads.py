"""One BLAS thread while a fit or a prediction runs, so that results do not depend on the machine's thread count.

Why: the few dense products of the fit (the base map's least squares, the cells' Gram matrices, long dot
products of residuals) go through BLAS, which splits a sum across its threads: with 1 and 2 threads the
sums are added in different orders, and a model fitted on 100,000 rows differed in its base map's statistics
in the 15th digit (its file was not the same). :mod:`mmc_core.groups.sums` adds every per-group sum with ``bincount``
already; for the rest, BLAS is held to one thread (threadpoolctl, a dependency of scikit-learn) inside
:func:`one_blas_thread`. The products are small (a few hundred columns at most), so the cost is negligible.

Process-wide by nature, so nested and concurrent uses (the dashboard runs fits in threads) share one limit,
set by the first to enter and lifted when the last one leaves.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager

__all__ = ["one_blas_thread"]

_lock = threading.Lock()
_depth = 0
_stack: ExitStack | None = None


@contextmanager
def one_blas_thread():
    """BLAS limited to one thread while the block runs (see the module docstring)."""
    global _depth, _stack
    with _lock:
        if _depth == 0:
            from threadpoolctl import threadpool_limits

            _stack = ExitStack()
            _stack.enter_context(threadpool_limits(limits=1, user_api="blas"))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _stack is not None:
                _stack.close()
                _stack = None
