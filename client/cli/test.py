"""``sealbench test``: a participant's first question, "does my model or data fit this
benchmark?". Thin: options in, the library's compatibility test
(:mod:`sealbench.client.runs.compat`), rendering out."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from sealbench.client.cli.common import JsonOpt, ProfileOpt, emit_json, out, progress_bar, session
from sealbench.client.cli.common import table as print_table
from sealbench.client.errors import CompatibilityError
from sealbench.client.runs import compat

__all__ = ["test"]

_MARK = {"pass": "PASS", "fail": "FAIL", "skip": "skipped"}


def test(
    benchmark: Annotated[int, typer.Option(help="benchmark id")],
    model: Annotated[
        str | None,
        typer.Option(
            help="an ONNX file, or a registry model id whose weights ship with sealbench "
            "(default: the benchmark's reference model)"
        ),
    ] = None,
    model_id: Annotated[
        int | None,
        typer.Option(help="with --model FILE: the registry model it must be (digest compared)"),
    ] = None,
    dataset: Annotated[
        Path | None,
        typer.Option(
            help="a folder written by 'sealbench dataset prepare' (default: demo cases "
            "generated for the benchmark)"
        ),
    ] = None,
    cases: Annotated[int, typer.Option(help="number of demo cases (without --dataset)")] = 2,
    size: Annotated[
        str, typer.Option(help="grid of the demo cases: small (64x64x48) or full")
    ] = "small",
    max_seconds_per_case: Annotated[
        float,
        typer.Option(help="limit per case at the benchmark's full grid (estimated from the "
                     "measured time by voxel count)"),
    ] = compat.DEFAULT_MAX_SECONDS_PER_CASE,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> compat.CompatReport:
    """Compatibility test before associating: run a model on data under the benchmark's rules,
    on this machine in plain mode (no TEE, nothing uploaded), with the enclave's scoring. A
    model owner tests its model on demo data; a hospital tests the reference model on its
    prepared data. Exit 0 only if every check passes."""
    with (
        session(profile) as s,
        tempfile.TemporaryDirectory(prefix="sealbench-test-") as tmp,
        progress_bar(transient=True) as bar,
    ):
        task = bar.add_task("checking", total=None)

        def advance(what: str, done: int, total: int) -> None:
            bar.update(task, description=what, completed=done, total=total)

        report = compat.check_compatibility(
            s.client, benchmark, Path(tmp), model=model, model_id=model_id,
            dataset=dataset, cases=cases, size=size,
            max_seconds_per_case=max_seconds_per_case, progress=advance,
        )
    if json_out:
        emit_json(report.to_json())
    else:
        print_table(
            f"compatibility of {report.model} with benchmark {report.benchmark_id} "
            f"on {report.data} (plain mode: no TEE, nothing uploaded)",
            ("check", "result", "detail"),
            ((c.name, _MARK[c.status], c.detail) for c in report.checks),
        )
    if not report.passed:
        failed = ", ".join(c.name for c in report.failed)
        raise CompatibilityError(
            f"{len(report.failed)} of {len(report.checks)} checks failed ({failed})"
        )
    if not json_out:
        out().print("all checks passed")
    return report
