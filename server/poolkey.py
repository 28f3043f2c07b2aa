"""The registry's pool-release key (issue 27).

A benchmark that pools inside the TEE has its aggregator seal each pooled release to this key
(X25519, :mod:`sealbench.crypto.sealing`), so that the authority who launches the aggregator
hands on a release it cannot read: only the release the registry accepts, debiting every
included dataset, is ever opened and published. Without it the authority could rerun a pool for
a fresh noise draw, or pool chosen subsets, and keep what it read; every draw would cost the
sites privacy that no budget debited (``docs/privacy.md``, "Pooling inside the TEE").

The key lives in ``DATA_DIR/pool-release.key`` (or ``POOL_KEY_FILE``): PKCS#8 PEM, mode 0600,
written exclusively and atomically (:func:`~sealbench.crypto.sealing.save_private_key`), never
logged or printed; like the transparency log's signing key, it is made by ``sealbench-server
init`` (or at start in local mode) and read by every server process at start. Its public half
is recorded with each benchmark that names an aggregator, when the benchmark is created
(``benchmarks.pool_recipient_key``): the sites' grants name its digest in the aggregator's uid,
so the key is fixed for the benchmark's life like its images; a new key means a new benchmark
version and new consent. A registry that loses the file can no longer open its benchmarks'
pooled releases (they pool again under a new version); back it up with the database.
"""

from __future__ import annotations

import logging

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from sealbench.crypto.errors import CryptoError
from sealbench.crypto.sealing import generate_recipient_key, load_private_key, save_private_key
from sealbench.server.errors import ConfigurationError
from sealbench.server.settings import ServerSettings

__all__ = ["ensure_pool_key"]

log = logging.getLogger("sealbench.server")


def ensure_pool_key(settings: ServerSettings, *, create: bool) -> X25519PrivateKey:
    """Load the pool-release key; with ``create``, generate it first if there is none (two
    processes racing both end up with the one that was written first).
    :class:`ConfigurationError` for a missing (without ``create``), unreadable or too widely
    readable key file."""
    path = settings.effective_pool_key_file
    try:
        return load_private_key(path)
    except FileNotFoundError:
        if not create:
            raise ConfigurationError(
                f"no pool-release key at {path}: run 'sealbench-server init' first") from None
    except (CryptoError, OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot use the pool-release key {path}: {exc}") from exc
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = generate_recipient_key()
    try:
        save_private_key(path, key)
    except FileExistsError:
        return ensure_pool_key(settings, create=False)
    log.warning("generated the registry's pool-release key in %s", path)
    return key
