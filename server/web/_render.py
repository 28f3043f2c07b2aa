"""The dashboard's Jinja2 environment: templates shipped in the package, HTML autoescaping on
for every template, undefined variables an error, and a few formatting filters."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

__all__ = ["STATIC_DIR", "TEMPLATES_DIR", "Templates"]

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
STATIC_DIR = Path(__file__).resolve().parent / "static"


def _when(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _day(value: datetime | None) -> str:
    """A run's time as the registry keeps it: its UTC day (issue 40)."""
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d")


def _num(value: float | None, places: int = 4) -> str:
    return "—" if value is None else f"{value:.{places}f}"


def _short(digest: str | None, keep: int = 12) -> str:
    """``sha256:0123456789ab…`` for tables; the full value goes in a title attribute."""
    if not digest:
        return "—"
    algo, sep, hexpart = digest.partition(":")
    if not sep:
        return digest if len(digest) <= keep + 1 else digest[:keep] + "…"
    return f"{algo}:{hexpart[:keep]}…" if len(hexpart) > keep else digest


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


class Templates:
    """Renders the dashboard's templates to strings (autoescaped)."""

    def __init__(self, directory: Path = TEMPLATES_DIR) -> None:
        self._env = Environment(
            loader=FileSystemLoader(str(directory)),
            autoescape=select_autoescape(("html", "svg"), default=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._env.filters.update(when=_when, day=_day, num=_num, short=_short, pretty=_pretty)

    def render(self, name: str, context: dict[str, Any]) -> str:
        return self._env.get_template(name).render(context)
