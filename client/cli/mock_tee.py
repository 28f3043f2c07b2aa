"""``sealbench mock-tee``: the INSECURE local mock of the confidential cloud
(:class:`sealbench.mocktee.MockCloud`), run in the foreground."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from sealbench.client.cli.common import emit_json, out

__all__ = ["mock_tee_app", "mock_tee_up"]

mock_tee_app = typer.Typer(help="The INSECURE local mock of the confidential cloud.")


@mock_tee_app.command("up")
def mock_tee_up(
    state_dir: Annotated[Path, typer.Option(help="where the mock keeps its state")],
    iam_propagation_s: Annotated[float, typer.Option(
        min=0, max=86400,
        help="seconds before a changed KMS key or bucket IAM policy takes effect, as Google's "
        "IAM propagation delay (typically 2 minutes there; default 0: at once)",
    )] = 0.0,
) -> None:
    """Run the INSECURE mock confidential cloud in the foreground until Ctrl-C; prints its
    endpoints. Never put real data in it."""
    from sealbench.mocktee import MockCloud

    stop = threading.Event()
    cloud = MockCloud(state_dir.resolve(), iam_propagation_s=iam_propagation_s)
    endpoints = cloud.start()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        emit_json(endpoints.to_json())
        out().print(f"mock TEE up (state {state_dir.resolve()}); use it with "
                    f"'sealbench profile add NAME --server URL --mock-tee {state_dir.resolve()}'."
                    " Ctrl-C stops it.")
        stop.wait()
    finally:
        cloud.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
