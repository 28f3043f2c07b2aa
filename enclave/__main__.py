"""``python -m sealbench.enclave``: the entry point of the evaluation image.

The run specification comes only from the (attested) environment. The only option,
``--launcher-dir DIR``, points the attester at ``DIR/teeserver.sock`` and
``DIR/attestation_verifier_claims_token`` instead of ``/run/container_launcher/``; it exists for
the mock TEE. On Confidential Space it cannot be set: the image has no command override (the
key owners' policies require ``cmd_override`` to be empty), so the real paths are used.

Output: progress logs on stdout (logger ``sealbench.enclave``: steps and counts, never case ids,
metrics, keys or tokens). Exit 0 on success; otherwise the exit code of the
:class:`~sealbench.enclave.errors.EnclaveError` and one line ``sealbench-enclave: <reason>`` on
stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from sealbench.cloud.attester import LauncherAttester
from sealbench.enclave.errors import EnclaveError
from sealbench.enclave.run import run_enclave

__all__ = ["main"]

SOCKET_NAME = "teeserver.sock"
TOKEN_FILE_NAME = "attestation_verifier_claims_token"  # noqa: S105 - a file name


def _logging() -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("sealbench.enclave").setLevel(logging.INFO)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sealbench.enclave")
    parser.add_argument(
        "--launcher-dir",
        type=Path,
        default=None,
        help="directory of the (mock) launcher's socket and token file",
    )
    args = parser.parse_args(argv)
    _logging()
    attester = (
        LauncherAttester()
        if args.launcher_dir is None
        else LauncherAttester(args.launcher_dir / SOCKET_NAME, args.launcher_dir / TOKEN_FILE_NAME)
    )
    try:
        run_enclave(os.environ, attester)
    except EnclaveError as exc:
        print(f"sealbench-enclave: {exc}".replace("\n", " "), file=sys.stderr, flush=True)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
