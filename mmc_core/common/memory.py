"""Freed memory kept for reuse during large in-memory fits and predictions (glibc only).

Why: a fit on millions of rows allocates and frees large temporaries (a float per row, a few dozen per update)
thousands of times. glibc serves every allocation above 32 MB with a fresh ``mmap`` and returns it with
``munmap`` on free, so each new temporary faults in (and the kernel zeroes) fresh pages: at 10M rows x 200
groups x k = 4, 33 of 127 CPU seconds were system time (benchmarks/README.md, "10M rows in memory"). Inside
:func:`reuse_freed_memory` large blocks come from the heap instead (``M_MMAP_MAX = 0``) and freed blocks stay
in it (``M_TRIM_THRESHOLD`` at its maximum), so the next temporary reuses pages already mapped; on leaving, the
glibc defaults are restored and ``malloc_trim(0)`` hands the free memory back to the system. The results are
bit-identical (only where memory comes from changes); the peak can be a little higher (fragmentation).

Process-wide by nature (``mallopt``), so: only for tables of at least LARGE_ROWS rows, nested and concurrent
uses (the dashboard runs fits in threads) restore the defaults when the last one leaves, and nothing is touched
when the allocator is not glibc's or when the user tunes it through the environment (``MALLOC_*_`` variables or
``GLIBC_TUNABLES``), or when MMC_KEEP_MALLOC=1 is set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from contextlib import contextmanager

LARGE_ROWS = 500_000
# mallopt parameter numbers and glibc's defaults (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
DEFAULT_TRIM_THRESHOLD = 128 * 1024
DEFAULT_MMAP_MAX = 65536
KEEP_TRIM_THRESHOLD = 2**31 - 1  # mallopt takes a C int
_USER_TUNED = (
    "MALLOC_MMAP_MAX_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
    "GLIBC_TUNABLES",
    "MMC_KEEP_MALLOC",
)

_lock = threading.Lock()
_depth = 0
_libc: object = None  # None: not looked up yet; False: no glibc here


def glibc():
    """glibc's mallopt / malloc_trim, or None (another C library, or none found)."""
    global _libc
    if _libc is None:
        _libc = False
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            if all(hasattr(lib, f) for f in ("gnu_get_libc_version", "mallopt", "malloc_trim")):
                lib.mallopt.argtypes, lib.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
                lib.malloc_trim.argtypes, lib.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
                _libc = lib
        except OSError:
            pass
    return _libc or None


def _applies(n_rows) -> bool:
    return (
        n_rows is not None
        and n_rows >= LARGE_ROWS
        and not any(os.environ.get(v) for v in _USER_TUNED)
        and glibc() is not None
    )


@contextmanager
def reuse_freed_memory(n_rows):
    """Keep freed memory for reuse while the block runs, for a table of ``n_rows`` rows (see the module
    docstring); a no-op below LARGE_ROWS rows, without glibc, or when the allocator is tuned by the user."""
    global _depth
    lib = glibc() if _applies(n_rows) else None
    if lib is None:
        yield
        return
    with _lock:
        if _depth == 0:
            lib.mallopt(M_MMAP_MAX, 0)
            lib.mallopt(M_TRIM_THRESHOLD, KEEP_TRIM_THRESHOLD)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                lib.mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
                lib.mallopt(M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)
                lib.malloc_trim(0)
