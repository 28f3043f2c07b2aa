"""``python -m sealbench.enclave``: the entry point of the evaluation image
(``python -m sealbench.enclave aggregate``, or ``python -m sealbench.enclave.aggregate``: the
aggregator's, :mod:`sealbench.enclave.aggregate`, with the same process setup, :func:`serve`).

The run specification comes only from the (attested) environment. The evidence comes from the
installed platforms' own evidence sources (:class:`~sealbench.enclave.platforms.EvidenceSource`):
the platform is the one whose source yields a token its own verifier issued, never one an
operator names. The only option, ``--launcher-dir DIR``, is a *location*, not a platform: the
mock TEE's launcher socket in ``DIR`` (``DIR/teeserver.sock``) instead of
``/run/container_launcher/``; only a platform whose launcher can live elsewhere (the INSECURE
mock) accepts it. On Confidential Space it cannot be set: the image's launch policy allows no
command override and the key owners' conditions require ``cmd_override`` to be empty.

Before anything else it installs the process's egress guard
(:func:`~sealbench.enclave.network.install_egress_guard`): until the run is attested only the
launcher's socket and the loopback interface, then only the run's checked endpoints; every other
connection or name lookup, by the enclave, a plug-in or a model's runtime, is refused.

Output: progress logs on stdout (logger ``sealbench.enclave``: steps and counts, never case ids,
metrics, keys or tokens) next to their typed events (:mod:`sealbench.enclave.progress`). Exit 0
on success; otherwise the exit code of the :class:`~sealbench.contract.errors.EnclaveError`, its
``failed`` event on stdout (:class:`~sealbench.contract.events.RunFailed`: exit code, failure
code, reason; what a client reads) and one line ``sealbench-enclave: <reason> (exit <code>)`` on
stderr (for the operator).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from sealbench.contract.errors import EnclaveError
from sealbench.enclave.heap import return_freed_buffers
from sealbench.enclave.network import EgressGuard, install_egress_guard
from sealbench.enclave.platforms import EvidenceSource
from sealbench.enclave.progress import run_failed
from sealbench.enclave.run import run_enclave

__all__ = ["AGGREGATE_COMMAND", "main", "serve"]

#: The first argument that runs the aggregator workload (:mod:`sealbench.enclave.aggregate`).
AGGREGATE_COMMAND: Final = "aggregate"


def _logging() -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("sealbench.enclave").setLevel(logging.INFO)


#: A workload the entry point runs: the environment, the evidence, the process's egress guard.
Workload = Callable[[Mapping[str, str], EvidenceSource, EgressGuard], object]


def serve(argv: Sequence[str] | None, prog: str, workload: Workload) -> int:
    """The process around one workload (the evaluation's, or the aggregator's,
    :mod:`sealbench.enclave.aggregate`): ``--launcher-dir``, the egress guard before anything
    else, logging, and on failure the ``failed`` event, the operator's line and the exit code."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument(
        "--launcher-dir",
        type=Path,
        default=None,
        help="directory of the mock launcher's socket (a location; the platform is what the "
        "evidence found there proves)",
    )
    args = parser.parse_args(argv)
    egress = install_egress_guard(args.launcher_dir)
    return_freed_buffers()  # each case peaks where the first did (issue 42)
    _logging()
    try:
        workload(os.environ, EvidenceSource(args.launcher_dir), egress)
    except EnclaveError as exc:
        # The typed event is what a client reads (Confidential Space reports only its
        # launcher's exit code: the enclave's reaches the client in the event, on the serial
        # port); the prose line is the operator's, unchanged.
        run_failed(exc)
        print(f"sealbench-enclave: {exc} (exit {exc.exit_code})".replace("\n", " "),
              file=sys.stderr, flush=True)
        return exc.exit_code
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The evaluation; ``aggregate`` as the first argument runs the aggregator instead."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == [AGGREGATE_COMMAND]:
        from sealbench.enclave.aggregate import run_aggregator

        return serve(args[1:], f"python -m sealbench.enclave {AGGREGATE_COMMAND}",
                     lambda environ, source, egress: run_aggregator(
                         environ, source, egress=egress))
    return serve(args, "python -m sealbench.enclave",
                 lambda environ, source, egress: run_enclave(environ, source, egress=egress))


if __name__ == "__main__":
    sys.exit(main())
