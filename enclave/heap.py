"""The enclave process's heap: buffers of a case go back to the system when the case is done.

glibc's ``malloc`` maps an allocation of at least ``M_MMAP_THRESHOLD`` bytes by itself and unmaps
it on ``free``; the threshold starts at 128 KiB but rises with every such buffer freed (up to
32 MiB), so from the second case on most of a case's buffers (numpy temporaries, ONNX Runtime
tensors under 32 MiB) come from the heap and the per-thread arenas, which keep what is freed
fragmented: the peak of 4 full-size BraTS cases grew from 1,041 to 1,170 MiB that way (issue 42).
:func:`return_freed_buffers` fixes the threshold at :data:`MMAP_THRESHOLD_BYTES` (which also stops
its adjustment), so every case peaks where the first did, for the same CPU time
(``tests/perf/enclave_bench.py``). Elsewhere than glibc it does nothing and says so.
"""

from __future__ import annotations

import ctypes
import logging
import platform
from typing import Final

__all__ = ["MMAP_THRESHOLD_BYTES", "return_freed_buffers"]

_log = logging.getLogger("sealbench.enclave")

#: Allocations from this size up are mapped on their own and returned to the system when freed.
MMAP_THRESHOLD_BYTES: Final = 1 << 20
#: ``M_MMAP_THRESHOLD`` of glibc's ``<malloc.h>``.
_M_MMAP_THRESHOLD: Final = -3


def return_freed_buffers(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process; False (nothing
    changed) where the C library is not glibc or refuses the value."""
    if platform.libc_ver()[0] != "glibc":
        _log.debug("not glibc: the heap's mmap threshold is left as it is")
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))
