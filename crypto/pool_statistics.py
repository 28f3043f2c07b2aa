"""Encrypting a site's pool statistics for the aggregator (issue 27, ``pool.sealed``).

A site's enclave holds its dataset's DEK (released by the hospital's key for the approved
evaluation image); the aggregator is released the same DEK by the same key, for the approved
aggregator image only. The statistics are therefore encrypted under a key derived from that
DEK, so they live "under the hospital's own key" with no second key to provision, and no party
outside those two attested workloads can open them::

    K    = HKDF-SHA256(DEK, salt = none, info = "sealbench pool statistics v1")   (32 bytes)
    AAD  = canonical JSON {"commitment": c, "purpose": "sealbench-pool-statistics-v1",
                           "run_id": r}
    blob = the streaming AEAD (:mod:`sealbench.crypto.streaming`) of the document under K, AAD

The AAD binds the run id and the commitment the site's attested summary carries: a stale
object (an earlier run's, another commitment) or one moved to another run's location fails to
decrypt, before anything is parsed. The derived key differs from the DEK, so it never decrypts
the dataset's own objects (and their keys never decrypt this).
"""

from __future__ import annotations

from typing import Final

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from sealbench.crypto import streaming
from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.envelope import DataKey

__all__ = ["decrypt_statistics", "encrypt_statistics", "statistics_aad"]

_INFO: Final = b"sealbench pool statistics v1"
_PURPOSE: Final = "sealbench-pool-statistics-v1"


def _key(dataset_dek: DataKey) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=streaming.KEY_SIZE, salt=None,
                info=_INFO).derive(dataset_dek.secret_bytes())


def statistics_aad(run_id: str, commitment: str) -> bytes:
    """The associated data of one run's statistics object."""
    return canonical_json({"commitment": commitment, "purpose": _PURPOSE, "run_id": run_id})


def encrypt_statistics(dataset_dek: DataKey, run_id: str, commitment: str,
                       document: bytes) -> bytes:
    """``pool.sealed``: ``document`` encrypted for whoever holds the dataset's DEK."""
    return streaming.encrypt_bytes(_key(dataset_dek), document,
                                   statistics_aad(run_id, commitment))


def decrypt_statistics(dataset_dek: DataKey, run_id: str, commitment: str,
                       blob: bytes) -> bytes:
    """The document in ``blob``; :class:`~sealbench.crypto.errors.IntegrityError` (opaque) for
    another key, run or commitment, or any altered byte."""
    return streaming.decrypt_bytes(_key(dataset_dek), blob, statistics_aad(run_id, commitment))
