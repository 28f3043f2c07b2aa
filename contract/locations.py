"""What makes a storage location acceptable in the contract: the rules a run spec's and the
registry's ``gs://bucket[/prefix]`` / ``file:///abs/path`` values must meet beyond their pattern,
so that the enclave's storage layer (:func:`sealbench.platforms.storage.parse_storage_uri`) will
open them. The contract states the rules without importing the platforms; the two must agree
(``tests/unit/contract/test_locations.py`` checks them against each other).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Final
from urllib.parse import unquote, urlsplit

__all__ = ["object_name_problem", "storage_uri_problem"]

#: Cloud Storage's own limit on object names (UTF-8 bytes).
MAX_OBJECT_NAME_BYTES: Final = 1024
#: The local store's reserved temporary directory (no object name may start with it).
RESERVED_SEGMENT: Final = ".sealbench-tmp"
_BUCKET_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")


def object_name_problem(name: str) -> str | None:
    """Why ``name`` is not a safe object name (the rules of
    :func:`sealbench.platforms.storage.validate_object_name`), or None."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if len(name.encode("utf-8", errors="surrogatepass")) > MAX_OBJECT_NAME_BYTES:
        return f"longer than {MAX_OBJECT_NAME_BYTES} UTF-8 bytes"
    if not name.isprintable():
        return "contains a control or non-printable character"
    if "\\" in name:
        return "contains a backslash"
    if name.startswith("/"):
        return "starts with '/'"
    segments = name.split("/")
    for segment in segments:
        if segment == "":
            return "has an empty path segment ('//' or a trailing '/')"
        if segment in (".", ".."):
            return f"has a {segment!r} path segment"
    if segments[0] == RESERVED_SEGMENT:
        return f"{RESERVED_SEGMENT!r} is reserved"
    return None


def storage_uri_problem(uri: str) -> str | None:
    """Why ``uri`` is no storage location the enclave will open, in the words of
    :func:`sealbench.platforms.storage.parse_storage_uri` without the URI itself, or None."""
    parts = urlsplit(uri)
    if parts.query or parts.fragment:
        return "storage URIs take no query or fragment"
    if parts.scheme == "gs":
        bucket = parts.netloc
        if not (3 <= len(bucket) <= 63 and set(bucket) <= _BUCKET_CHARS
                and bucket[0].isalnum() and bucket[-1].isalnum()):
            return f"{bucket!r} is not a valid bucket name"
        prefix = parts.path.lstrip("/")
        if prefix:
            problem = object_name_problem(prefix[:-1] if prefix.endswith("/") else prefix)
            if problem is not None:
                return f"bad prefix: {problem}"
        return None
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            return "file URIs must be local (file:///path)"
        if not PurePosixPath(unquote(parts.path)).is_absolute():
            return "file URIs need an absolute path"
        return None
    return "expected gs://bucket/prefix or file:///path"
