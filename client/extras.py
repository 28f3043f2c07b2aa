"""Which optional extra of the ``sealbench`` distribution installs each third-party package, so a
command that needs a package its role's extra does not bring says which extra to add instead of
failing with a bare ``ModuleNotFoundError``.

The ``client`` extra is the registry's command line (profiles, benchmarks, associations, audit,
keys, result submission); commands that prepare data, seal, run or open results import the
heavier packages of the ``enclave``, ``gcp``, ``mock`` or ``docker`` extras inside the command,
and the CLI's error boundary turns the missing import into :class:`MissingExtraError` through
:func:`missing_extra`. ``docs/cli.md`` lists what each command needs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

from sealbench.client.errors import ClientError, NotAvailableError

__all__ = [
    "EXTRA_OF_MODULE",
    "MissingExtraError",
    "install_hint",
    "missing_extra",
    "require_extras",
]

#: Top-level import name of each optional dependency -> the extra of ``pyproject.toml`` that
#: installs it (a test checks this table against the installed distributions' metadata).
EXTRA_OF_MODULE: Final[Mapping[str, str]] = MappingProxyType(
    {
        # server
        "alembic": "server",
        "fastapi": "server",
        "httptools": "server",
        "jinja2": "server",
        "multipart": "server",
        "psycopg": "server",
        "pydantic_settings": "server",
        "python_multipart": "server",
        "sqlalchemy": "server",
        "uvicorn": "server",
        "uvloop": "server",
        # enclave: inference, NIfTI I/O and metrics
        "nibabel": "enclave",
        "numpy": "enclave",
        "onnxruntime": "enclave",
        "opendp": "enclave",
        "scipy": "enclave",
        # gcp: the Google Cloud client libraries (also what talks to the mock's KMS and storage)
        "google": "gcp",
        "google_crc32c": "gcp",
        "requests": "gcp",
        # mock: the local stand-in of the confidential cloud
        "celpy": "mock",
        "gcp_storage_emulator": "mock",
        # docker
        "docker": "docker",
        # datasets: public data for the demo (WDBC ships inside scikit-learn)
        "sklearn": "datasets",
        # train
        "onnx": "train",
        "torch": "train",
    }
)


#: Packages whose presence shows an extra is installed (what :func:`require_extras` looks for).
_PROBES: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "server": ("fastapi", "sqlalchemy", "alembic", "uvicorn"),
        "enclave": ("onnxruntime", "nibabel", "numpy", "scipy"),
        "gcp": ("google.auth", "google.cloud.kms", "google.cloud.storage", "requests"),
        "mock": ("celpy", "gcp_storage_emulator"),
        "docker": ("docker",),
        "datasets": ("sklearn",),
    }
)


class MissingExtraError(NotAvailableError):
    """The command needs a package of an extra that is not installed (exit 3)."""

    def __init__(self, module: str, extra: str, *, message: str | None = None) -> None:
        super().__init__(
            message
            or f"this command needs the Python package {module!r} of the sealbench extra "
            f"{extra!r}, which is not installed",
            hint=install_hint(extra),
        )
        self.module = module
        self.extra = extra


def install_hint(extra: str) -> str:
    """``pip install 'sealbench[EXTRA]'`` (adds the extra to the installed sealbench)."""
    return f"pip install 'sealbench[{extra}]'"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing
        return False


def require_extras(extras: Iterable[str], what: str) -> None:
    """Raise :class:`MissingExtraError` naming every extra of ``extras`` that lacks a package
    (found without importing it), so ``what`` (e.g. ``the demo``) fails before doing anything
    rather than at its first import of each."""
    missing: dict[str, list[str]] = {}
    for extra in extras:
        absent = [module for module in _PROBES[extra] if not _installed(module)]
        if absent:
            missing[extra] = absent
    if missing:
        names = ",".join(missing)
        modules = ", ".join(m for absent in missing.values() for m in absent)
        raise MissingExtraError(
            modules,
            names,
            message=f"{what} needs the sealbench extras {names} (not installed: {modules})",
        )


def missing_extra(exc: BaseException) -> MissingExtraError | None:
    """The :class:`MissingExtraError` that ``exc`` (or an exception it was raised from) stands
    for: an import of a package that an extra installs. None for anything else, including a
    missing module of sealbench itself (a broken installation, not a missing extra). Only
    explicit causes (``raise ... from exc``) are followed: an error raised while handling an
    import failure is another error; a :class:`ClientError` already says what to do."""
    if isinstance(exc, ClientError):
        return None  # already says what to do
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModuleNotFoundError) and current.name:
            top = current.name.partition(".")[0]
            extra = EXTRA_OF_MODULE.get(top)
            if extra is not None:
                error = MissingExtraError(top, extra)
                error.__cause__ = exc  # 'sealbench -v' shows where the import was
                return error
        current = current.__cause__
    return None
