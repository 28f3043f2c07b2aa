"""What one ``sealbench run`` asks for, as one value: :class:`RunOptions`, built by the command
from its flags (or by the demo and the tests directly) and passed to
:func:`sealbench.client.runs.launch.prepare_runs`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from sealbench.client.errors import ConfigError
from sealbench.client.runs.batch import StageTimeouts

__all__ = ["RunOptions"]


@dataclass(frozen=True)
class RunOptions:
    """The runs to launch and how: which pairs (``benchmark`` with ``dataset`` and ``model``,
    or ``all_approved``), on which TEE backend, ``parallel`` at a time, with which stage
    timeouts, and each backend's settings (None: the profile's or the benchmark's default)."""

    benchmark: int
    dataset: int | None = None
    model: int | None = None
    #: every approved (dataset, model) pair not yet evaluated with the benchmark's image
    all_approved: bool = False
    parallel: int = 1
    tee: str = "mock"
    #: run again even if a run of the pair already succeeded
    force: bool = False
    start_timeout_s: float = StageTimeouts.start_s
    #: seconds a started run may take; None: what the benchmark's attested limits let the
    #: dataset's cases take (:func:`sealbench.client.runs.launch.run_timeout_for`), never less
    run_timeout_s: float | None = None
    #: launch as a debug image (the key owners must refuse it)
    insecure_debug_image: bool = False
    #: docker: the image to run (default: the benchmark's image digest)
    image: str | None = None
    #: the launch options of the backend's platform, its declared model
    #: (:func:`~sealbench.client.runs.launchers.for_profile.launch_options`: Confidential
    #: Space's project, zone, TEE, accelerator, ...); None: its defaults, the account's
    launch: BaseModel | None = None
    #: keep the workloads (a VM) running when the runs are interrupted, and after them
    keep_vm: bool = False
    #: where a run outside this machine writes its result (default: the account's)
    result_uri: str | None = None
    #: a GPU run whose model ends on ONNX Runtime's CPU provider goes on
    allow_cpu_fallback: bool = False
    #: seconds a run may wait for IAM to apply a fresh grant (None: what is left of the
    #: default window after the owners' last sync)
    iam_wait_s: int | None = None
    #: state directory of the mock TEE (None: the profile's)
    mock_tee: Path | None = None

    @property
    def timeouts(self) -> StageTimeouts:
        return StageTimeouts(start_s=self.start_timeout_s, workload_s=(
            StageTimeouts.workload_s if self.run_timeout_s is None else self.run_timeout_s))

    def check(self) -> None:
        """Refuse a selection that names no pairs, or both ways of naming them
        (:class:`~sealbench.client.errors.ConfigError`, the command's messages)."""
        if (self.model is None) == (not self.all_approved):
            raise ConfigError("name --model ID or --all-approved (not both)")
        if self.dataset is None and not self.all_approved:
            raise ConfigError("name --dataset ID (or --all-approved for each of your datasets)")
