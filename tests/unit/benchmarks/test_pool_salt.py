"""The statistics document's salt (issue 27): the commitment is public in every site's attested
summary, so the document carries 32 fresh random bytes; the same results never give the same
commitment twice, and a guess of every case's result cannot be confirmed against it. A reader
refuses a document without a well-formed salt."""

from __future__ import annotations

import hashlib
import json

import pytest

from sealbench.benchmarks import pooling
from sealbench.benchmarks.wdbc import summary as s
from sealbench.benchmarks.wdbc.plugin import PLUGIN as WDBC
from sealbench.crypto.canonical import canonical_json

#: A site whose every case failed: the document is guessable but for its salt.
FAILED = [s.WdbcCaseResult(case_id=f"case-{i}", malignant=True, score=None, reason="failed")
          for i in range(3)]


def test_same_results_give_a_fresh_commitment_each_time() -> None:
    one, c1 = pooling.seal_statistics(WDBC.ref, "run-a", FAILED)
    two, c2 = pooling.seal_statistics(WDBC.ref, "run-a", FAILED)
    assert c1 != c2 and one != two
    salts = {json.loads(d)["salt"] for d in (one, two)}
    assert len(salts) == 2
    assert all(len(bytes.fromhex(salt)) == pooling.SALT_BYTES for salt in salts)
    # both open, under their own commitment, to the same results
    a = pooling.open_statistics(WDBC, one, c1, run_id="run-a")
    b = pooling.open_statistics(WDBC, two, c2, run_id="run-a")
    assert a.results == b.results and a.salt != b.salt


def test_a_guess_of_every_case_without_the_salt_misses_the_commitment() -> None:
    document, commitment = pooling.seal_statistics(WDBC.ref, "run-a", FAILED)
    guess = json.loads(document)
    del guess["salt"]
    assert "sha256:" + hashlib.sha256(canonical_json(guess)).hexdigest() != commitment
    guess["salt"] = "0" * 64
    assert "sha256:" + hashlib.sha256(canonical_json(guess)).hexdigest() != commitment
    # the document is exactly canonical JSON: the commitment is its bytes' digest
    assert canonical_json(json.loads(document)) == document
    assert pooling.commitment_of(document) == commitment


@pytest.mark.parametrize("salt", [None, "", "ab" * 31, "AB" * 32, 7])
def test_document_without_a_well_formed_salt_refused(salt: object) -> None:
    document, _ = pooling.seal_statistics(WDBC.ref, "run-a", FAILED)
    doc = json.loads(document)
    if salt is None:
        del doc["salt"]
    else:
        doc["salt"] = salt
    forged = canonical_json(doc)
    with pytest.raises(pooling.PoolingError, match="salt"):
        pooling.open_statistics(WDBC, forged, pooling.commitment_of(forged), run_id="run-a")
