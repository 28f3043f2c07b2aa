"""The memory bound of a run: the benchmark's declared limit
(:attr:`~sealbench.benchmarks.interface.RunLimits.memory_bytes`) applied to the enclave's process
from loading the model to the end of the evaluation.

:class:`ProcessMemoryLimit` lowers the soft ``RLIMIT_DATA`` (heap and private writable mappings,
where every ONNX Runtime and numpy buffer lives; unlike ``RLIMIT_AS`` it does not count address
space reserved but never made writable, which CUDA reserves in bulk) and restores the previous
soft limit afterwards (the hard limit is never touched). An allocation over it fails cleanly:
ONNX Runtime raises its ``Fail`` ("Failed to allocate memory for requested buffer"), numpy a
``MemoryError``; the case becomes a flagged ``memory`` failure and the run goes on. The time
limits are enforced per case in :mod:`sealbench.enclave.evaluation`.
"""

from __future__ import annotations

import contextlib
import logging
import resource
from collections.abc import Iterator
from typing import Protocol

__all__ = ["MemoryLimit", "ProcessMemoryLimit"]

_log = logging.getLogger("sealbench.enclave")


class MemoryLimit(Protocol):
    """Bounds the memory of what runs inside :meth:`applied`."""

    def applied(self, limit_bytes: int) -> contextlib.AbstractContextManager[None]: ...


class ProcessMemoryLimit:
    """:class:`MemoryLimit` of the whole process, with ``RLIMIT_DATA``."""

    @contextlib.contextmanager
    def applied(self, limit_bytes: int) -> Iterator[None]:
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        limit = limit_bytes if hard == resource.RLIM_INFINITY else min(limit_bytes, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
        _log.info("memory limit: %d MiB of data for the model and the evaluation", limit >> 20)
        try:
            yield
        finally:
            resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
