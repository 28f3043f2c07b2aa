"""Canonical JSON: the one byte encoding that sealbench hashes, signs over and binds into AADs.

Objects are serialised with sorted keys, no insignificant whitespace, UTF-8 (non-ASCII kept as
is) and no NaN or infinities, so that equal values always give equal bytes. Only JSON types are
accepted (dict with str keys, list/tuple, str, int, float, bool, None).
"""

from __future__ import annotations

import json

__all__ = ["canonical_json"]


def canonical_json(value: object) -> bytes:
    """Encode ``value`` canonically. Raises ``ValueError`` for NaN/Infinity and ``TypeError``
    for values that are not JSON types."""
    return json.dumps(
        value,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    ).encode("utf-8")
