"""ONNX Runtime as a plug-in uses it: telemetry off, sessions only of self-contained models, runs
bounded by the enclave's per-case limits.

**Telemetry.** ONNX Runtime (1.32) creates ``$XDG_CACHE_HOME`` or
``~/.cache/Microsoft/DeveloperTools/.onnxruntime/`` with a ``deviceid`` and an event database
(``onnxruntime.db``) *when it is imported*; only ``ORT_DISABLE_TELEMETRY=1`` in the environment
before that import stops it, and :func:`onnxruntime.disable_telemetry_events` stops the events of
the rest of the process. This module sets the first (when onnxruntime is not imported yet) and
calls the second at import; plug-ins import ONNX Runtime through it (:data:`ort`), the evaluation
image sets the variable in its own environment and the enclave's entry point before any import.

**Sessions.** :func:`open_session` refuses a model that is not exactly its bytes
(:func:`sealbench.benchmarks.onnx_safety.check_self_contained`: external data anywhere, an
operator domain the benchmark does not allow) and reads only the ONNX format (never ORT's
flatbuffer format, which the structural check does not read).

**Runs.** :func:`run` is ``session.run`` bounded by the current
:class:`~sealbench.benchmarks.limits.CaseGuard`: its ``RunOptions.terminate`` is set when the
case's time passes, and an allocation that fails is recorded as a ``memory`` failure. It raises
what ``session.run`` raises (a plug-in translates it as it always has); the enclave reads the
guard for the reason.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

if "onnxruntime" not in sys.modules:  # read once, when ONNX Runtime's library loads
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import onnxruntime as ort  # type: ignore[import-untyped]

from sealbench.benchmarks.limits import current_guard
from sealbench.benchmarks.onnx_safety import check_self_contained

__all__ = ["ALLOCATION_FAILURES", "open_session", "ort", "run"]

ort.disable_telemetry_events()

#: What ONNX Runtime's message says when an allocation failed (its arena, or ``bad_alloc``):
#: it raises its generic ``Fail`` for both, so the text is all there is to tell.
ALLOCATION_FAILURES: Final = ("Failed to allocate memory", "bad_alloc", "std::bad_alloc")


def open_session(
    model_bytes: bytes,
    options: Any | None = None,
    providers: Sequence[str] = ("CPUExecutionProvider",),
    *,
    domains: Collection[str],
) -> Any:
    """An ``InferenceSession`` of ``model_bytes`` after :func:`check_self_contained` (with the
    operator ``domains`` the benchmark allows) passed; raises its
    :class:`~sealbench.benchmarks.onnx_safety.UnsafeModelError`, or what ONNX Runtime raises."""
    check_self_contained(model_bytes, domains)
    options = options if options is not None else ort.SessionOptions()
    options.add_session_config_entry("session.load_model_format", "ONNX")
    return ort.InferenceSession(model_bytes, options, providers=list(providers))


def run(session: Any, outputs: Sequence[str] | None, feeds: Mapping[str, Any]) -> Any:
    """``session.run(outputs, feeds)``, stopped when the current case's time limit passes (and
    recorded as a ``memory`` failure when an allocation fails)."""
    guard = current_guard()
    if guard is None:
        return session.run(outputs, dict(feeds))
    options = ort.RunOptions()
    options.log_severity_level = 4  # a stopped run is the guard's to report, not ORT's log

    def stop() -> None:
        options.terminate = True

    try:
        with guard.stoppable(stop):
            return session.run(outputs, dict(feeds), options)
    except MemoryError:
        guard.out_of_memory()
        raise
    except Exception as exc:  # ORT raises its own untyped Fail for everything
        if any(marker in str(exc) for marker in ALLOCATION_FAILURES):
            guard.out_of_memory()
        raise
