"""The benchmark pin: which plug-in, at which version, scores a benchmark (``brats-2023-gli/1``).

One type from end to end. ``benchmark create`` parses the authority's text once; the registry
stores the pin as one column, the run spec carries it as ``SEALBENCH_METRICS_VERSION`` (the
owners' key-release conditions bind it through the workload uid), the enclave loads the plug-in it
names, the result documents repeat it, and the leaderboard reads it back. Every model of the
contract that holds a pin types it :data:`Pin`: parsed from ``<name>/<version>`` on the way in,
written back as that text on the way out, so the wire format is the string it always was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Final, Self

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

__all__ = ["NAME_PATTERN", "PIN_PATTERN", "VERSION_PATTERN", "BenchmarkPin", "Pin"]

#: A plug-in's name: lower-case letters, digits, ``.``, ``_``, ``-``; at most 48.
NAME_PATTERN: Final = "^[a-z0-9][a-z0-9._-]{0,47}$"
#: A plug-in's version: at most 16 characters.
VERSION_PATTERN: Final = "^[A-Za-z0-9][A-Za-z0-9._-]{0,15}$"
#: The whole pin, ``<name>/<version>`` (RE2- and CEL-compatible: it goes into conditions).
PIN_PATTERN: Final = "^[a-z0-9][a-z0-9._-]{0,47}/[A-Za-z0-9][A-Za-z0-9._-]{0,15}$"
_NAME: Final = re.compile(NAME_PATTERN)
_VERSION: Final = re.compile(VERSION_PATTERN)


@dataclass(frozen=True, order=True)
class BenchmarkPin:
    """A plug-in pinned by name and version, written ``<name>/<version>``."""

    name: str
    version: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"invalid benchmark plug-in name {self.name!r} (expected "
                             "lower-case letters, digits, '.', '_', '-'; at most 48)")
        if not isinstance(self.version, str) or not _VERSION.match(self.version):
            raise ValueError(f"invalid benchmark plug-in version {self.version!r}")

    @classmethod
    def parse(cls, text: str) -> Self:
        """``<name>/<version>`` or ``ValueError`` saying what was expected."""
        if not isinstance(text, str):
            raise ValueError(f"benchmark plug-in pin: expected text, not {type(text).__name__}")
        name, sep, version = text.partition("/")
        if not sep:
            raise ValueError(f"benchmark plug-in {text!r}: expected <name>/<version>")
        return cls(name, version)

    def __str__(self) -> str:
        return f"{self.name}/{self.version}"


def _coerce(value: Any) -> BenchmarkPin:
    return value if isinstance(value, BenchmarkPin) else BenchmarkPin.parse(value)


#: A pin as a pydantic field: accepts the text (or a :class:`BenchmarkPin`), holds the type,
#: serialises to the text.
Pin = Annotated[
    BenchmarkPin,
    BeforeValidator(_coerce),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "pattern": PIN_PATTERN}),
]
