"""What a newcomer met on a first try, each fixed (issue 45 part 5), through the real commands:

- ``profile add`` does not switch the current profile behind the user's back (only --use, or
  the first profile, makes it current);
- ``dataset prepare`` exits 11 (documented in ``sealbench --help``) when it rejected any case,
  and prints each reason once;
- ``dataset prepare`` and ``dataset seal`` stopped by Ctrl-C say what was kept and how to
  resume (exit 130), and leave nothing half-written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sealbench.benchmarks.interface import BenchmarkPin
from sealbench.benchmarks.registry import load
from sealbench.client.assets import prepare as assets
from sealbench.client.cli import app
from sealbench.client.cli import assets as assets_cli
from sealbench.client.errors import CASES_REJECTED_EXIT, Interrupted

SMALL = BenchmarkPin.parse("brats-2023-gli/1-64x64x48")


def _current(runner: CliRunner) -> str | None:
    listed = runner.invoke(app, ["profile", "ls", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    return next((r["name"] for r in rows if r.get("current")), None)


def test_profile_add_does_not_switch_the_current_profile(cli_home: Path) -> None:
    runner = CliRunner()

    def add(name: str, *extra: str) -> str:
        added = runner.invoke(app, ["profile", "add", name, "--server", "http://127.0.0.1:9",
                                    "--token", "sbt_x", *extra])
        assert added.exit_code == 0, added.output
        return added.output

    assert "and in use" in add("hospital")  # the first profile: nothing to switch from
    said = add("second-site")
    assert _current(runner) == "hospital"
    assert "the current profile is still hospital" in said
    assert "sealbench profile use second-site" in said
    add("third-site", "--use")
    assert _current(runner) == "third-site"


@pytest.fixture
def raw_cases(tmp_path: Path) -> Path:
    """Three small BraTS cases, two of them broken (a modality missing)."""
    raw = tmp_path / "raw"
    load(SMALL).write_demo_dataset(raw, 3, seed=1)
    for case in sorted(p for p in raw.iterdir() if p.is_dir())[1:]:
        next(case.glob("*-t2w.nii.gz")).unlink()
    return raw


def test_prepare_with_rejected_cases_exits_11_and_gives_each_reason_once(
        cli_home: Path, raw_cases: Path, tmp_path: Path) -> None:
    prepared = tmp_path / "prepared"
    done = CliRunner().invoke(app, ["dataset", "prepare", str(raw_cases), str(prepared),
                                    "--definition", "brats-small"])
    assert done.exit_code == CASES_REJECTED_EXIT == 11, done.output
    assert done.output.count("missing t2w") == 2  # two cases, each reason once
    assert "prepared 1 case, 2 cases rejected" in done.output
    assert (prepared / "manifest.json").is_file()  # the accepted case is prepared
    assert "'dataset prepare' prepared the dataset but rejected some cases" in CliRunner(
    ).invoke(app, ["--help"]).output


def test_prepare_without_rejections_exits_0(cli_home: Path, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    load(SMALL).write_demo_dataset(raw, 1, seed=2)
    done = CliRunner().invoke(app, ["dataset", "prepare", str(raw), str(tmp_path / "out"),
                                    "--definition", "brats-small"])
    assert done.exit_code == 0, done.output


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".partial" in p.name)


def test_prepare_interrupted_keeps_nothing_and_says_so(raw_cases: Path, tmp_path: Path) -> None:
    out = tmp_path / "prepared"

    def ctrl_c(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(Interrupted) as stopped:
        assets.prepare(raw_cases, out, load(SMALL), ctrl_c)
    assert stopped.value.exit_code == 130
    assert "nothing was written" in str(stopped.value)
    assert stopped.value.hint is not None and "run the same command again" in stopped.value.hint
    assert not out.exists() and _leftovers(tmp_path) == []


class _WritesInPlace:
    """A third-party plug-in that writes straight into the output folder (no temporary
    folder) and is stopped by Ctrl-C halfway."""

    layout = load(SMALL).layout

    def prepare(self, raw_dir: Path, out_dir: Path, **kwargs: Any) -> Any:
        (out_dir / "data" / "cases").mkdir(parents=True)
        (out_dir / "data" / "cases" / "half.npy").write_bytes(b"\x93NUMPY")
        raise KeyboardInterrupt


def test_prepare_interrupted_removes_what_a_plugin_half_wrote_in_place(
        raw_cases: Path, tmp_path: Path) -> None:
    out = tmp_path / "prepared"
    with pytest.raises(Interrupted) as stopped:
        assets.prepare(raw_cases, out, _WritesInPlace(), None)  # type: ignore[arg-type]
    assert "nothing was written" in str(stopped.value)
    assert not out.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "mine.txt").write_text("an earlier folder")
    with pytest.raises(Interrupted) as again:
        assets.prepare(raw_cases, kept, _WritesInPlace(), None)  # type: ignore[arg-type]
    assert "existed before, so nothing in it was removed" in str(again.value)
    assert (kept / "mine.txt").is_file()


class _CtrlCBar:
    """The progress bar at a terminal where the user presses Ctrl-C at the first update."""

    def __enter__(self) -> _CtrlCBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def update(self, task: int, **kwargs: Any) -> None:
        if kwargs.get("completed"):
            raise KeyboardInterrupt


def test_prepare_command_interrupted_exits_130_saying_what_was_kept(
        cli_home: Path, raw_cases: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assets_cli, "progress_bar", _CtrlCBar)
    out = tmp_path / "prepared"
    done = CliRunner().invoke(app, ["dataset", "prepare", str(raw_cases), str(out),
                                    "--definition", "brats-small"])
    assert done.exit_code == 130, done.output
    assert "nothing was written" in done.output and "run the same command again" in done.output
    assert "Aborted" not in done.output
    assert not out.exists() and _leftovers(tmp_path) == []


def test_seal_command_interrupted_exits_130_saying_what_was_kept_and_how_to_resume(
        cli_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's side (the store's: every object whole, resumed with the same key, is
    tests/unit/enclave/test_client_sealing.py's): Ctrl-C after 2 of 5 objects."""
    added = CliRunner().invoke(app, ["profile", "add", "hospital", "--server",
                                     "http://127.0.0.1:9", "--token", "sbt_x"])
    assert added.exit_code == 0, added.output

    def sealing(*args: Any, progress: Any, **kwargs: Any) -> Any:
        progress(2, 5)
        raise KeyboardInterrupt

    monkeypatch.setattr(assets_cli.lifecycle, "seal_owned_asset", sealing)
    done = CliRunner().invoke(app, ["dataset", "seal", str(tmp_path), "--dataset", "7"])
    assert done.exit_code == 130, done.output
    assert "2 of 5 sealed objects were uploaded and are kept" in done.output
    assert "the registry was not told where the dataset is" in done.output
    assert "sealing resumes where it stopped" in done.output


# -- running on another hospital's dataset -----------------------------------------------------


def test_run_on_another_hospitals_dataset_is_refused_before_any_run_is_recorded(
        runner: CliRunner, cli_home: Path, http: Any, registry: Any,
        api: dict[str, Any], benchmark_body: Any, tmp_path: Path) -> None:
    from sealbench.client.cli.common import using_client_factory
    from sealbench.client.registry.api import RegistryClient
    from sealbench.client.registry.profiles import Profile, ProfileStore, ResolvedProfile
    from sealbench.crypto.digest import sha256_digest
    from sealbench.server.schemas import DatasetCreate

    bench = api["authority"].create_benchmark(benchmark_body("theirs"))
    api["admin"].approve_benchmark(bench.id)
    theirs = api["hospital"].register_dataset(DatasetCreate(
        name="site-a", digest=sha256_digest(b"site-a"), case_count=3))
    store = ProfileStore.from_environment({"SEALBENCH_CONFIG_DIR": str(cli_home)})
    store.add("modelco", Profile(server="http://testserver", token=registry.tokens["modelco"]))

    def in_process(profile: ResolvedProfile) -> RegistryClient:
        return RegistryClient.connect(profile.server, profile.token, transport=http._transport)

    with using_client_factory(in_process):
        done = runner.invoke(app, ["run", "--benchmark", str(bench.id), "--dataset",
                                   str(theirs.id), "--all-approved", "--tee", "mock"])
    assert done.exit_code == 4, done.output  # the registry's rules refused it
    assert f"dataset {theirs.id} is not yours" in done.output
    assert "nothing was run or recorded" in done.output
    recorded = [p for p in cli_home.parent.rglob("*") if "runs" in p.parts and p.is_file()]
    assert recorded == []


# -- a key refusal's cause, printed once -------------------------------------------------------

_CAUSE = ("the key owner's policy does not release the key to this workload: " + "the "
          "attested image, the data and model digests and the result recipient must all be "
          "named in one of its grants " * 6).strip()


def test_a_refused_runs_long_cause_is_printed_once(
        cli_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch as the runner ends it when the enclave's key release is refused: the failed
    run's line gives the cause, and the command's error points to it instead of repeating it
    (it keeps the refusal's exit code and advice)."""
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from sealbench.client.cli import run as run_cli
    from sealbench.client.errors import KeyReleaseDeniedError
    from sealbench.client.runs.batch import RunOutcome
    from sealbench.client.runs.launch import RunBatch
    from sealbench.client.runs.records import RunRecord

    added = CliRunner().invoke(app, ["profile", "add", "hospital", "--server",
                                     "http://127.0.0.1:9", "--token", "sbt_x"])
    assert added.exit_code == 0, added.output
    record = RunRecord(run_id="r-1", benchmark_id=1, dataset_id=2, model_id=3, tee="mock",
                       image_digest="sha256:" + "1" * 64, result_uri="file:///r", status="failed",
                       started_at=datetime.now(UTC), error=_CAUSE, reason="key_release_denied")
    batch = RunBatch(RunOutcome((record,), (), False), (KeyReleaseDeniedError(
        f"key release denied: {_CAUSE}", hint="ask the dataset's owner to run policy sync"),))
    prepared = SimpleNamespace(plan=SimpleNamespace(todo=(record,)),
                               execute=lambda on_event: batch)
    monkeypatch.setattr(run_cli, "prepare_runs", lambda *args, **kwargs: prepared)
    done = CliRunner().invoke(app, ["run", "--benchmark", "1", "--dataset", "2",
                                    "--all-approved", "--tee", "mock"])
    assert done.exit_code == 7, done.output  # the refusal's exit code
    flat = " ".join(done.output.split())
    assert flat.count("the key owner's policy does not release the key") == 1, done.output
    assert "1 of 1 run(s) failed; the cause is on each failed run's line above" in flat
    assert "ask the dataset's owner to run policy sync" in flat


# -- --help says the right task and names no issue numbers -------------------------------------


def test_help_texts_name_the_generic_task_and_no_issue_numbers() -> None:
    import re

    from sealbench.client.cli.doc import render

    reference = render("")
    assert "segmentation models" not in reference
    assert "Confidential federated evaluation of models" in reference
    numbered = re.findall(r"(?i)\b(?:issue|#)\s?\d+", reference)
    assert numbered == [], numbered
