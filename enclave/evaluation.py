"""Steps 4 and 5: stream the dataset and evaluate it, case by case.

Step 4 (:func:`open_dataset`) decrypts ``manifest.sealed``, checks the manifest's digest against
the expected data digest, reads ``dataset.json`` from the metadata object to open the plug-in's
layout, and maps every case object to the cases it holds (one, or several small ones, as the
plug-in's layout groups them; a case in two objects is refused). Step 5 (:func:`evaluate`) then
walks the case objects in index order; a background thread downloads, decrypts and verifies
object ``i+1`` while the cases of object ``i`` are predicted and scored, and each case is decoded
on the main thread only when the one before it is done: one decoded case is in memory at a time,
beside the encoded files of about two objects (issue 42: a decoded full-size BraTS case is 145 MB,
its files 16 MB).

Failure rules: a digest or authentication failure (tampered, swapped, substituted, truncated
object) raises :class:`~sealbench.contract.errors.AssetIntegrityError` and aborts the run; a case
that authenticates but cannot be decoded, or whose inference fails, becomes a flagged
:meth:`failure <sealbench.benchmarks.interface.Benchmark.failure>` of the benchmark plug-in,
with its reason, and is penalised in the aggregates; nothing is skipped.

Limits (the plug-in's :class:`~sealbench.benchmarks.interface.RunLimits`, part of its pin):
each prediction runs under a :func:`~sealbench.benchmarks.limits.case_guard` of the per-case
limit, which stops the plug-in's ONNX Runtime runs when it passes; a case it stopped, or whose
allocation failed under the memory limit (:mod:`sealbench.enclave.bounds`), is a flagged
failure with reason ``timeout`` or ``memory``, and the next case runs.

**The run's limit follows from the cases' (issue 40)**: the evaluation may take
``n_cases * case_seconds`` for the predictions plus ``run_seconds`` for the plug-in's own work
(loading, scoring) (:func:`evaluation_seconds`). A model therefore cannot spend the run's time
on one case to fail the cases after it, nor fail the whole run: what it does with a case (spin,
raise, allocate) shows only in that case's value, a flagged failure, which the release counts
like any other. Only the plug-in's own loading and scoring overrunning ``run_seconds`` ends the
evaluation early (the results so far, every case not yet predicted flagged ``timeout``).

The data contract, grid included, is the pinned plug-in's (the pin is attested): a dataset
whose ``dataset.json`` states another contract or grid (``brats-2023-gli/1`` is 240x240x155,
``brats-2023-gli/1-64x64x48`` the small grid) is refused before any case is read
(:class:`~sealbench.contract.errors.AssetRejected`, the whole run), and a case whose volumes are
on another grid than that contract's fails to load: a flagged failure with the shapes in its
reason. How case files group
and load, and how a case is scored, is the plug-in's (:mod:`sealbench.benchmarks.interface`).
Error messages name objects by position ("case object 3/20"),
never by case id.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final, TypeVar

from sealbench.benchmarks.interface import (
    BenchmarkError,
    CaseError,
    CaseResult,
    DatasetLayout,
    LoadedCase,
    RunLimits,
    run_limits_of,
)
from sealbench.benchmarks.limits import TIMEOUT, LimitReason, case_guard
from sealbench.contract.errors import AssetIntegrityError, AssetRejected, StorageFailure
from sealbench.crypto.digest import parse_digest
from sealbench.crypto.errors import CryptoError, IntegrityError
from sealbench.crypto.sealed_asset import (
    MANIFEST_OBJECT,
    AssetIndex,
    IndexedObject,
    open_bundle,
    open_index,
)
from sealbench.enclave.progress import case_done, cases_counted
from sealbench.enclave.steps import VerifiedModel
from sealbench.platforms import CloudError, ObjectCorrupted

__all__ = ["CaseSlot", "Evaluation", "VerifiedDataset", "evaluate", "evaluation_seconds",
           "open_dataset", "prefetched"]

_log = logging.getLogger("sealbench.enclave")

#: Largest ``manifest.sealed`` read.
MAX_INDEX_CIPHERTEXT: Final = (64 << 20) + (1 << 20)
#: Largest case object read (five full-grid float64 volumes would be ~360 MB; prepared cases
#: are int16/uint8 gzip, far smaller).
MAX_CASE_CIPHERTEXT: Final = 1 << 30
_MAX_DATASET_JSON: Final = 1 << 20

T = TypeVar("T")


@dataclass(frozen=True)
class CaseSlot:
    """One case: the object of the index that holds it, the case id its files name (kept
    private) and its files in that object. An object holds one case or, for benchmarks whose
    cases are small (a row of features), several: the plug-in's layout groups them."""

    obj: IndexedObject
    case_id: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class VerifiedDataset:
    """The dataset's index, authenticated and matching the expected data digest."""

    model: VerifiedModel
    index: AssetIndex
    layout: DatasetLayout
    cases: tuple[CaseSlot, ...]


def _read(model: VerifiedModel, name: str, cap: int, what: str) -> bytes:
    asset = model.keys.dataset
    timer = model.keys.destination.run.timer
    with timer.measure("download"):
        try:
            return asset.store.get_bytes(asset.name(name), cap)
        except ObjectCorrupted as exc:
            # Object names are opaque (HMACs, never case ids), so the name may be shown.
            detail = f"object {exc.name} does not match the store's checksum"
            raise AssetIntegrityError(f"{what} failed verification: {detail}") from exc
        except CloudError as exc:
            raise StorageFailure(f"{what} cannot be read: {type(exc).__name__}") from exc


def _open(
    model: VerifiedModel, index: AssetIndex, obj: IndexedObject, what: str
) -> Mapping[str, bytes]:
    ciphertext = _read(model, obj.name, MAX_CASE_CIPHERTEXT, what)
    with model.keys.destination.run.timer.measure("decrypt"):
        try:
            return open_bundle(model.keys.dataset.dek, index, obj, ciphertext)
        except IntegrityError as exc:
            # The crypto message may name a file path, hence a case id: say only which object.
            raise AssetIntegrityError(f"{what} failed verification ({type(exc).__name__})") from exc


def open_dataset(model: VerifiedModel) -> VerifiedDataset:
    """Step 4: authenticate the index, check the data digest, open the dataset's layout under
    the plug-in's contract and map every case object to the cases it holds."""
    run = model.keys.destination.run
    asset = model.keys.dataset
    ciphertext = _read(model, MANIFEST_OBJECT, MAX_INDEX_CIPHERTEXT, "the dataset manifest")
    with run.timer.measure("decrypt"):
        try:
            index = open_index(
                asset.dek, asset.location.asset_id, ciphertext, parse_digest(run.spec.data_digest)
            )
        except CryptoError as exc:
            raise AssetIntegrityError(f"the dataset manifest failed verification: {exc}") from exc
    meta = [o for o in index.objects if not o.name.startswith("cases/")]
    case_objects = [o for o in index.objects if o.name.startswith("cases/")]
    dataset_json = None
    for obj in meta:
        files = _open(model, index, obj, "the dataset metadata object")
        dataset_json = files.get(run.benchmark.layout.dataset_file, dataset_json)
    if dataset_json is None:
        raise AssetRejected("the dataset holds no dataset.json (is it a prepared dataset?)")
    if len(dataset_json) > _MAX_DATASET_JSON:
        raise AssetRejected("dataset.json is larger than 1 MiB")
    try:
        layout = run.benchmark.open_dataset(dataset_json)
    except BenchmarkError as exc:
        raise AssetRejected(f"the dataset does not meet the benchmark's contract: {exc}") from exc
    slots = []
    seen: set[str] = set()
    for position, obj in enumerate(case_objects, start=1):
        try:
            grouped = layout.group(obj.files)
        except CaseError as exc:
            raise AssetRejected(
                f"case object {position}/{len(case_objects)} is not made of prepared cases"
            ) from exc
        if not grouped:
            raise AssetRejected(f"case object {position}/{len(case_objects)} holds no case")
        if seen & grouped.keys():
            raise AssetRejected(
                f"case object {position}/{len(case_objects)} repeats a case of another object"
            )
        seen |= grouped.keys()
        slots += [CaseSlot(obj, case_id, tuple(files)) for case_id, files in grouped.items()]
    if not slots:
        raise AssetRejected("the dataset holds no cases")
    cases_counted(len(slots))
    return VerifiedDataset(model, index, layout, tuple(slots))


def prefetched(
    items: Sequence[T], fetch: Callable[[T], object]
) -> Generator[object, None, None]:
    """``fetch(item)`` for each item in order, fetching the next item on a background thread
    while the caller works on the current one (never more than one fetch ahead)."""
    if not items:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sealbench-prefetch") as pool:
        pending: Future[object] | None = pool.submit(fetch, items[0])
        for position in range(len(items)):
            assert pending is not None
            try:
                current = pending.result()
            finally:
                pending = None
            if position + 1 < len(items):
                pending = pool.submit(fetch, items[position + 1])
            yield current
            del current


@dataclass(frozen=True)
class _Loaded:
    slot: CaseSlot
    case: LoadedCase


@dataclass(frozen=True)
class _Fetched:
    """A case's files, downloaded, decrypted and authenticated on the prefetch thread (its
    object's files: an object may hold several cases), but not decoded: decoding waits for the
    main thread, after the previous case is done, so that a decoded case is never in memory
    beside the one being predicted (a full-size BraTS case is 145 MB decoded, 16 MB of files)."""

    slot: CaseSlot
    files: Mapping[str, bytes]


def _objects(dataset: VerifiedDataset) -> list[tuple[int, tuple[CaseSlot, ...]]]:
    """The case objects in index order (numbered from 1), each with its cases."""
    grouped: dict[str, list[CaseSlot]] = {}
    for slot in dataset.cases:
        grouped.setdefault(slot.obj.name, []).append(slot)
    return [(position, tuple(slots)) for position, slots in enumerate(grouped.values(), start=1)]


def _fetch_object(
    dataset: VerifiedDataset, total: int
) -> Callable[[tuple[int, tuple[CaseSlot, ...]]], object]:
    def fetch(item: tuple[int, tuple[CaseSlot, ...]]) -> object:
        position, slots = item
        files = _open(dataset.model, dataset.index, slots[0].obj,
                      f"case object {position}/{total}")
        return [_Fetched(slot, files) for slot in slots]

    return fetch


def _load(dataset: VerifiedDataset, fetched: _Fetched) -> _Loaded | CaseResult:
    """Decode one fetched case with the plug-in's layout, or its flagged failure."""
    run = dataset.model.keys.destination.run
    slot = fetched.slot
    with run.timer.measure("load"):
        try:
            return _Loaded(slot, dataset.layout.load(
                {name: fetched.files[name] for name in slot.files}))
        except (CaseError, KeyError) as exc:
            reason = f"case could not be loaded: {exc}" if isinstance(
                exc, CaseError) else "case could not be loaded: a file is missing"
            return run.benchmark.failure(slot.case_id, reason)


@dataclass(frozen=True)
class Evaluation:
    """Per-case results of every case of the dataset, sorted by case id."""

    dataset: VerifiedDataset
    results: tuple[CaseResult, ...]


#: The most of a plug-in's error text a failed case's reason keeps: the text may echo what the
#: model output, and the per-case results' size must follow from the case count, not the model.
MAX_REASON_CHARS: Final = 300


def _clipped(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS] + "…"


def _segment_and_score(
    dataset: VerifiedDataset, loaded: _Loaded, seconds: float
) -> tuple[CaseResult, LimitReason | None]:
    """The case's result, and the limit that stopped it (None when none did)."""
    run = dataset.model.keys.destination.run
    case = loaded.case
    failed: str | None = None
    with run.timer.measure("infer"), case_guard(seconds) as guard:
        try:
            prediction = dataset.model.runner.predict(case)
        except BenchmarkError as exc:
            failed = f"inference failed: {_clipped(exc)}"
        except MemoryError:
            guard.out_of_memory()
        except Exception as exc:  # noqa: BLE001 - what a model makes a runtime raise fails its
            # case, never the run (issue 40); the type only, its text may quote the inputs
            failed = f"inference failed: {type(exc).__name__}"
    stopped = guard.reason
    if stopped is not None:  # whatever the plug-in made of the stopped run
        return run.benchmark.failure(case.case_id, stopped), stopped
    if failed is not None:
        return run.benchmark.failure(case.case_id, failed), None
    with run.timer.measure("score"):
        try:
            return run.benchmark.score(case, prediction), None
        except BenchmarkError as exc:  # a prediction the plug-in cannot score fails its case
            return run.benchmark.failure(case.case_id,
                                         f"prediction not scored: {_clipped(exc)}"), None


def _cases(dataset: VerifiedDataset, stream: Iterator[object]) -> Iterator[_Loaded | CaseResult]:
    for batch in stream:
        assert isinstance(batch, list)
        for fetched in batch:
            yield _load(dataset, fetched)
        del batch


def evaluation_seconds(limits: RunLimits, n_cases: int) -> float:
    """What the evaluation of ``n_cases`` cases may take: each case's inference limit, and the
    plug-in's allowance for its own loading and scoring (``run_seconds``). A run limit that did
    not grow with the cases would let a model that spins on some cases fail the others."""
    return limits.evaluation_seconds(n_cases)


def evaluate(dataset: VerifiedDataset) -> Evaluation:
    """Step 5: segment and score every case (prefetching the next object), recording
    failures, within the plug-in's time limits (:func:`evaluation_seconds`)."""
    run = dataset.model.keys.destination.run
    limits = run_limits_of(run.benchmark)
    total = len(dataset.cases)
    allowed = evaluation_seconds(limits, total)
    deadline = time.monotonic() + allowed
    results: list[CaseResult] = []
    objects = _objects(dataset)
    with contextlib.closing(prefetched(objects, _fetch_object(dataset, len(objects)))) as stream:
        for item in _cases(dataset, stream):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if isinstance(item, _Loaded):
                result, stopped = _segment_and_score(
                    dataset, item, min(limits.case_seconds, left))
                if stopped is not None:
                    _log.warning("step 5/7: case %d/%d stopped by the benchmark's %s limit",
                                 len(results) + 1, total, stopped)
            else:
                result = item
            results.append(result)
            case_done(len(results), total)
            del item  # the case's volumes go before the next case is decoded
    done = {r.case_id for r in results}
    late = [slot.case_id for slot in dataset.cases if slot.case_id not in done]
    if late:
        _log.warning("step 5/7: the run's time limit (%g s) is spent: %d case(s) not evaluated, "
                     "flagged timeout", allowed, len(late))
        results += [run.benchmark.failure(case_id, TIMEOUT) for case_id in late]
    failed = sum(r.failed for r in results)
    _log.info("step 5/7: %d cases evaluated, %d failed", total, failed)
    return Evaluation(dataset, tuple(sorted(results, key=lambda r: r.case_id)))
