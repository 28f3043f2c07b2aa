"""``python -m sealbench.mocktee --state-dir DIR``: run the INSECURE mock confidential cloud
until interrupted, printing its endpoints as JSON (also written to ``DIR/endpoints.json``)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path

from sealbench.mocktee.server import MockCloud, MockPorts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sealbench.mocktee",
        description="INSECURE local mock of Confidential Space, STS, IAM, KMS and Cloud Storage.",
    )
    parser.add_argument("--state-dir", type=Path, required=True, help="where all state is kept")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        choices=["127.0.0.1"],
        help="the mock only ever listens on the loopback interface",
    )
    parser.add_argument(
        "--ports",
        default="",
        type=MockPorts.parse,
        help="e.g. verifier=9100,sts=9101,iam=9102,kms=9103,storage=9104,compute=9107 "
        "(default: the ports of the previous run, else free ones)",
    )
    parser.add_argument(
        "--iam-propagation-s",
        type=float,
        default=0.0,
        help="seconds before a changed KMS key or bucket IAM policy takes effect, as Google's "
        "propagation delay (default 0: at once)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    ports = args.ports if args.ports != MockPorts() else None
    cloud = MockCloud(
        args.state_dir.resolve(), ports=ports, iam_propagation_s=args.iam_propagation_s
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    endpoints = cloud.start()
    print(json.dumps(endpoints.to_json()), flush=True)
    try:
        stop.wait()
    finally:
        cloud.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
