"""How the enclave reaches each owner's storage and key: the :class:`AssetAccess` interface, which
each platform implements (:meth:`sealbench.platforms.platform.Platform.asset_access`; Google's:
:class:`sealbench.gcp.access.CloudAccess`).

An implementation acts as the attested workload federated through the owner's pool, against the
token destinations the run spec names as the attesting platform checked them (the enclave hands
it nothing else), and opens the owner's storage (``store``) and key (``key_wrapper``). The result
destination is written with the **data owner's** access.
"""

from __future__ import annotations

from typing import Protocol

from sealbench.contract.spec import AssetLocation
from sealbench.crypto.envelope import KeyWrapper
from sealbench.platforms.storage import BlobStore

__all__ = ["AssetAccess"]


class AssetAccess(Protocol):
    """Opens an owner's storage and key on behalf of the attested workload."""

    def store(self, uri: str, pool_provider: str) -> tuple[BlobStore, str]:
        """``(store, prefix)`` of ``uri``, acting as a workload federated through the pool
        ``pool_provider`` names (an owner's :attr:`~sealbench.contract.spec.AssetLocation.
        pool_provider`; the aggregator's is the authority's, which has no KMS key)."""
        ...

    def key_wrapper(self, owner: AssetLocation) -> KeyWrapper:
        """``owner``'s KMS key, acting as a workload federated through ``owner``'s pool."""
        ...
