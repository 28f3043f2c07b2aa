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

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from sealbench.client.errors import ClientError, NotAvailableError

__all__ = ["EXTRA_OF_MODULE", "MissingExtraError", "install_hint", "missing_extra"]

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
        # train
        "onnx": "train",
        "torch": "train",
    }
)


class MissingExtraError(NotAvailableError):
    """The command needs a package of an extra that is not installed (exit 3)."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"this command needs the Python package {module!r} of the sealbench extra "
            f"{extra!r}, which is not installed",
            hint=install_hint(extra),
        )
        self.module = module
        self.extra = extra


def install_hint(extra: str) -> str:
    """``pip install 'sealbench[EXTRA]'`` (adds the extra to the installed sealbench)."""
    return f"pip install 'sealbench[{extra}]'"


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
