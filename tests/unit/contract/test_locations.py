"""The contract's storage-location rules say what the platforms' storage layer accepts, in the
same words, without the contract importing it."""

from __future__ import annotations

import pytest

from sealbench.contract.locations import storage_uri_problem
from sealbench.platforms.errors import InvalidStorageUri
from sealbench.platforms.storage import parse_storage_uri

URIS = [
    "gs://bucket-a/prefix", "gs://bucket-a", "gs://bucket-a/p/q/", "gs://Bucket/x", "gs://ab/x",
    "gs://bucket-a/a//b", "gs://bucket-a/../x", "gs://bucket-a/.sealbench-tmp/x",
    "gs://bucket-a/x?y=1", "gs://bucket-a/x#f", "gs://bucket-a/a\\b", "file:///abs/path",
    "file://localhost/abs", "file://host/abs", "file:relative", "s3://bucket/x", "plain",
]


@pytest.mark.parametrize("uri", URIS)
def test_the_contract_refuses_what_the_storage_layer_refuses(uri: str) -> None:
    try:
        parse_storage_uri(uri)
    except InvalidStorageUri as exc:
        assert storage_uri_problem(uri) == str(exc).split(": ", 1)[-1]
    else:
        assert storage_uri_problem(uri) is None
