"""The typed registry client: one method per ``/api/v1`` endpoint, taking and returning the
server's own wire schemas (:mod:`sealbench.server.schemas`, which import only pydantic).

It runs over an injected :class:`httpx.Client` (a real one from :meth:`RegistryClient.connect`,
or FastAPI's ``TestClient`` in tests), with named timeouts, retries with exponential backoff on
idempotent calls only (GET and PUT; a POST is never repeated behind the caller's back), and
every failure translated once into :mod:`sealbench.client.errors`: the server's JSON error body
``{code, message}`` becomes the matching :class:`~sealbench.client.errors.RegistryError`, a
connection failure :class:`~sealbench.client.errors.ServerUnavailableError`. The token is sent
as ``Authorization: Bearer`` and never appears in an error or a log line.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Final, Literal, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from sealbench.client.errors import (
    AuthenticationFailed,
    ConflictError,
    InvalidRequestError,
    NotAllowedError,
    NotFoundError,
    PrivacyBudgetExceeded,
    RegistryError,
    ResultRejectedError,
    ServerUnavailableError,
)
from sealbench.contract.pool import PoolInputs
from sealbench.contract.pool_authorization import PoolAuthorization
from sealbench.server.schemas import (
    AssociationCreate,
    AssociationDecision,
    AssociationPublic,
    AssociationStatus,
    AuditEventPublic,
    AuditVerification,
    BenchmarkCreate,
    BenchmarkLeaderboardUpdate,
    BenchmarkPublic,
    BenchmarkState,
    BenchmarkStateUpdate,
    CoordinatesPublic,
    CoordinatesUpdate,
    DatasetBudget,
    DatasetCreate,
    DatasetPublic,
    ErrorBody,
    GrantsReport,
    GrantsStatus,
    Health,
    Inbox,
    Leaderboard,
    ModelCreate,
    ModelPublic,
    Page,
    ResultCreate,
    ResultPublic,
    UserPublic,
    VersionInfo,
)
from sealbench.server.schemas.audit import (
    AuditEventRange,
    CheckpointPublic,
    ConsistencyProofPublic,
    CosignatureCreate,
    CosignaturePublic,
    InclusionProofPublic,
)
from sealbench.server.schemas.leaderboard import PooledLeaderboard
from sealbench.server.schemas.pools import (
    PoolAuthorizationCreate,
    PoolAuthorizationPublic,
    PooledReleaseCreate,
    PooledReleasePublic,
)
from sealbench.server.schemas.runs import (
    BenchmarkProgress,
    RunBatchPublic,
    RunPublic,
    RunReport,
    RunReportBatch,
    RunReportItem,
    RunState,
)

__all__ = [
    "API_PREFIX",
    "BACKOFF_S",
    "CONNECT_TIMEOUT_S",
    "MAX_ATTEMPTS",
    "PAGE_SIZE",
    "READ_TIMEOUT_S",
    "AssetKind",
    "RegistryClient",
]

log = logging.getLogger("sealbench.client")



API_PREFIX: Final = "/api/v1"
#: Seconds to establish a connection to the registry.
CONNECT_TIMEOUT_S: Final = 5.0
#: Seconds to wait for a response (result verification fetches a JWKS, so not too short).
READ_TIMEOUT_S: Final = 30.0
#: Seconds to send a request body.
WRITE_TIMEOUT_S: Final = 30.0
#: Seconds to wait for a free connection from the pool.
POOL_TIMEOUT_S: Final = 5.0
#: Attempts of an idempotent call (the first one included).
MAX_ATTEMPTS: Final = 3
#: First backoff between attempts, doubled each time.
BACKOFF_S: Final = 0.25
#: Items requested per page when listing.
PAGE_SIZE: Final = 200
#: Listing stops here rather than paging forever through a misbehaving server.
MAX_ITEMS: Final = 100_000
_MAX_ERROR_BODY = 16_384
_RETRY_STATUSES = frozenset({502, 503, 504})
_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT"})

AssetKind = Literal["dataset", "model"]
M = TypeVar("M", bound=BaseModel)

_BY_STATUS: dict[int, type[RegistryError]] = {
    401: AuthenticationFailed,
    403: NotAllowedError,
    404: NotFoundError,
    409: ConflictError,
    413: InvalidRequestError,
    422: InvalidRequestError,
}


def _plural(kind: AssetKind) -> str:
    return "datasets" if kind == "dataset" else "models"


class RegistryClient:
    """Calls the registry at ``http.base_url`` as the holder of ``token``."""

    def __init__(
        self,
        http: httpx.Client,
        token: str | None,
        *,
        attempts: int = MAX_ATTEMPTS,
        backoff: float = BACKOFF_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._http = http
        self._token = token
        self._attempts = max(1, attempts)
        self._backoff = backoff
        self._sleep = sleep

    @classmethod
    def connect(
        cls, server: str, token: str | None, *, transport: httpx.BaseTransport | None = None
    ) -> RegistryClient:
        """A client with its own connection pool to ``server`` (``http(s)://host:port``)."""
        timeout = httpx.Timeout(
            connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S, write=WRITE_TIMEOUT_S,
            pool=POOL_TIMEOUT_S,
        )
        http = httpx.Client(base_url=server.rstrip("/"), timeout=timeout, transport=transport)
        return cls(http, token)

    @property
    def server(self) -> str:
        return str(self._http.base_url).rstrip("/")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: BaseModel | None = None,
        params: Mapping[str, str | int] | None = None,
    ) -> httpx.Response:
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        content = body.model_dump_json().encode() if body is not None else None
        if content is not None:
            headers["Content-Type"] = "application/json"
        attempts = self._attempts if method in _IDEMPOTENT else 1
        delay = self._backoff
        for attempt in range(1, attempts + 1):
            try:
                response = self._http.request(
                    method, path, content=content, params=params, headers=headers
                )
            except httpx.TransportError as exc:
                if attempt == attempts:
                    raise ServerUnavailableError(
                        f"cannot reach the registry at {self.server} "
                        f"({type(exc).__name__}: {exc})"
                    ) from exc
                log.info("registry %s %s: %s; retrying", method, path, type(exc).__name__)
            else:
                if response.status_code not in _RETRY_STATUSES or attempt == attempts:
                    return self._checked(method, path, response)
                log.info("registry %s %s: HTTP %d; retrying", method, path, response.status_code)
            self._sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _checked(self, method: str, path: str, response: httpx.Response) -> httpx.Response:
        status = response.status_code
        if status < 400:
            return response
        raw = response.content[:_MAX_ERROR_BODY]
        try:
            error = ErrorBody.model_validate_json(raw)
        except ValidationError:
            if status >= 500:
                raise ServerUnavailableError(
                    f"the registry at {self.server} failed: HTTP {status} on {method} {path}"
                ) from None
            raise RegistryError(
                f"{method} {path} answered HTTP {status} without a sealbench error body",
                hint="check that the server URL points at a sealbench registry "
                "('sealbench profile ls')",
                status=status,
            ) from None
        message = error.message
        if error.details:
            message += ": " + "; ".join(
                f"{'.'.join(str(p) for p in d.loc)}: {d.msg}" for d in error.details[:5]
            )
        if status >= 500:
            raise ServerUnavailableError(
                f"the registry failed ({error.code}): {message}",
                hint="try again later; if it persists, tell the registry operator",
            )
        if error.code == "privacy_budget_exceeded":
            raise PrivacyBudgetExceeded(message, status=status, code=error.code)
        if error.code == "result_rejected":
            raise ResultRejectedError(message, status=status, code=error.code)
        if error.code == "plugin_not_installed":  # the registry's state, not the result's
            raise ResultRejectedError(
                message, status=status, code=error.code,
                hint="the registry's operator must install the benchmark's plug-in (see "
                "docs/server.md); the result is kept here: submit the same run again then "
                "(running it again would not help)")
        kind = _BY_STATUS.get(status, RegistryError)
        raise kind(message, status=status, code=error.code)

    def _parse(self, model: type[M], response: httpx.Response) -> M:
        try:
            return model.model_validate_json(response.content)
        except ValidationError as exc:
            raise RegistryError(
                f"the registry at {self.server} sent a response this client does not understand "
                f"({exc.error_count()} schema errors)",
                hint="check that the client and server versions match ('sealbench whoami')",
            ) from exc

    def _get(self, model: type[M], path: str, params: Mapping[str, Any] | None = None) -> M:
        return self._parse(model, self._send("GET", path, params=params))

    def _post(self, model: type[M], path: str, body: BaseModel | None = None) -> M:
        return self._parse(model, self._send("POST", path, body=body))

    def _put(self, model: type[M], path: str, body: BaseModel) -> M:
        return self._parse(model, self._send("PUT", path, body=body))

    def _all(
        self, item: type[M], path: str, params: Mapping[str, Any] | None = None
    ) -> tuple[M, ...]:
        items: list[M] = []
        offset: int | None = 0
        while offset is not None and len(items) < MAX_ITEMS:
            query = {**(params or {}), "limit": PAGE_SIZE, "offset": offset}
            page = self._get(Page[item], path, query)  # type: ignore[valid-type]
            items.extend(page.items)
            offset = page.next_offset
        return tuple(items)

    # -- meta and users ------------------------------------------------------------------------

    def health(self) -> Health:
        return self._get(Health, "/health")

    def version(self) -> VersionInfo:
        return self._get(VersionInfo, "/version")

    def me(self) -> UserPublic:
        return self._get(UserPublic, f"{API_PREFIX}/users/me")

    # -- benchmarks ------------------------------------------------------------------------------

    def create_benchmark(self, body: BenchmarkCreate) -> BenchmarkPublic:
        return self._post(BenchmarkPublic, f"{API_PREFIX}/benchmarks", body)

    def list_benchmarks(self, state: BenchmarkState | None = None) -> tuple[BenchmarkPublic, ...]:
        params = {"state": state} if state else None
        return self._all(BenchmarkPublic, f"{API_PREFIX}/benchmarks", params)

    def get_benchmark(self, benchmark_id: int) -> BenchmarkPublic:
        return self._get(BenchmarkPublic, f"{API_PREFIX}/benchmarks/{benchmark_id}")

    def approve_benchmark(self, benchmark_id: int) -> BenchmarkPublic:
        return self._post(BenchmarkPublic, f"{API_PREFIX}/benchmarks/{benchmark_id}/approve")

    def publish_leaderboard(self, benchmark_id: int, published: bool) -> BenchmarkPublic:
        return self._post(BenchmarkPublic,
                          f"{API_PREFIX}/benchmarks/{benchmark_id}/leaderboard",
                          BenchmarkLeaderboardUpdate(published=published))

    def close_benchmark(self, benchmark_id: int) -> BenchmarkPublic:
        return self._post(BenchmarkPublic, f"{API_PREFIX}/benchmarks/{benchmark_id}/close")

    def set_benchmark_state(
        self, benchmark_id: int, state: Literal["rejected", "retired"]
    ) -> BenchmarkPublic:
        return self._post(
            BenchmarkPublic,
            f"{API_PREFIX}/benchmarks/{benchmark_id}/state",
            BenchmarkStateUpdate(state=state),
        )

    # -- datasets and models ------------------------------------------------------------------

    def register_dataset(self, body: DatasetCreate) -> DatasetPublic:
        return self._post(DatasetPublic, f"{API_PREFIX}/datasets", body)

    def list_datasets(self, owner_id: int | None = None) -> tuple[DatasetPublic, ...]:
        params = {"owner_id": owner_id} if owner_id else None
        return self._all(DatasetPublic, f"{API_PREFIX}/datasets", params)

    def get_dataset(self, dataset_id: int) -> DatasetPublic:
        return self._get(DatasetPublic, f"{API_PREFIX}/datasets/{dataset_id}")

    def dataset_budget(self, dataset_id: int) -> DatasetBudget:
        """The dataset's privacy budget, its spend, every debit and the cost per release of
        each benchmark it is associated with."""
        return self._get(DatasetBudget, f"{API_PREFIX}/datasets/{dataset_id}/budget")

    def register_model(self, body: ModelCreate) -> ModelPublic:
        return self._post(ModelPublic, f"{API_PREFIX}/models", body)

    def list_models(self, owner_id: int | None = None) -> tuple[ModelPublic, ...]:
        params = {"owner_id": owner_id} if owner_id else None
        return self._all(ModelPublic, f"{API_PREFIX}/models", params)

    def get_model(self, model_id: int) -> ModelPublic:
        return self._get(ModelPublic, f"{API_PREFIX}/models/{model_id}")

    def put_coordinates(
        self, kind: AssetKind, asset_id: int, body: CoordinatesUpdate
    ) -> CoordinatesPublic:
        return self._put(
            CoordinatesPublic, f"{API_PREFIX}/{_plural(kind)}/{asset_id}/coordinates", body
        )

    def get_coordinates(self, kind: AssetKind, asset_id: int) -> CoordinatesPublic:
        return self._get(CoordinatesPublic, f"{API_PREFIX}/{_plural(kind)}/{asset_id}/coordinates")

    def report_grants(self, kind: AssetKind, asset_id: int, body: GrantsReport) -> GrantsStatus:
        """Record the grant set a ``policy sync`` wrote to the asset's key (its owner only)."""
        return self._put(GrantsStatus, f"{API_PREFIX}/{_plural(kind)}/{asset_id}/grants", body)

    def get_grants(self, kind: AssetKind, asset_id: int) -> GrantsStatus:
        """Whether the asset's key grants follow its approvals (its owner and approved
        parties)."""
        return self._get(GrantsStatus, f"{API_PREFIX}/{_plural(kind)}/{asset_id}/grants")

    # -- associations --------------------------------------------------------------------------

    def request_association(
        self, kind: AssetKind, benchmark_id: int, asset_id: int, *,
        exact_release_consent: bool = False,
    ) -> AssociationPublic:
        """Request (asset owner) or invite (benchmark owner); a dataset's owner joining a
        benchmark that publishes exact figures sends ``exact_release_consent``."""
        return self._post(
            AssociationPublic,
            f"{API_PREFIX}/benchmarks/{benchmark_id}/{_plural(kind)}",
            AssociationCreate(asset_id=asset_id, exact_release_consent=exact_release_consent),
        )

    def list_associations(
        self, kind: AssetKind, benchmark_id: int, status: AssociationStatus | None = None
    ) -> tuple[AssociationPublic, ...]:
        params = {"status": status} if status else None
        return self._all(
            AssociationPublic, f"{API_PREFIX}/benchmarks/{benchmark_id}/{_plural(kind)}", params
        )

    def association_history(
        self, kind: AssetKind, benchmark_id: int, asset_id: int
    ) -> tuple[AssociationPublic, ...]:
        return self._all(
            AssociationPublic,
            f"{API_PREFIX}/benchmarks/{benchmark_id}/{_plural(kind)}/{asset_id}/history",
        )

    def decide_association(
        self, kind: AssetKind, benchmark_id: int, asset_id: int, *, approve: bool,
        exact_release_consent: bool = False,
    ) -> AssociationPublic:
        verb = "approve" if approve else "reject"
        return self._post(
            AssociationPublic,
            f"{API_PREFIX}/benchmarks/{benchmark_id}/{_plural(kind)}/{asset_id}/{verb}",
            AssociationDecision(exact_release_consent=True) if exact_release_consent else None,
        )

    def withdraw_association(
        self, kind: AssetKind, benchmark_id: int, asset_id: int
    ) -> AssociationPublic:
        return self._post(
            AssociationPublic,
            f"{API_PREFIX}/benchmarks/{benchmark_id}/{_plural(kind)}/{asset_id}/withdraw",
        )

    # -- results ------------------------------------------------------------------------------

    def submit_result(self, body: ResultCreate) -> ResultPublic:
        return self._post(ResultPublic, f"{API_PREFIX}/results", body)

    def list_results(self, benchmark_id: int | None = None) -> tuple[ResultPublic, ...]:
        params = {"benchmark_id": benchmark_id} if benchmark_id else None
        return self._all(ResultPublic, f"{API_PREFIX}/results", params)

    def get_result(self, result_id: int) -> ResultPublic:
        return self._get(ResultPublic, f"{API_PREFIX}/results/{result_id}")

    # -- pooling inside the TEE (issue 27) ---------------------------------------------------

    def authorize_pool(self, benchmark_id: int, model_id: int) -> PoolAuthorizationPublic:
        """Ask the registry to authorize a pool of ``model_id`` (issue 40): it chooses the
        inputs, debits every ledger on its log and answers what it authorized and left out."""
        return self._post(PoolAuthorizationPublic,
                          f"{API_PREFIX}/benchmarks/{benchmark_id}/pool-authorizations",
                          PoolAuthorizationCreate(model_id=model_id))

    def pool_authorizations(self, benchmark_id: int, model_id: int
                            ) -> list[PoolAuthorizationPublic]:
        """The model's pool authorizations, oldest first."""
        from pydantic import TypeAdapter

        response = self._send(
            "GET", f"{API_PREFIX}/benchmarks/{benchmark_id}/pool-authorizations",
            params={"model_id": model_id})
        try:
            return TypeAdapter(list[PoolAuthorizationPublic]).validate_json(response.content)
        except ValidationError as exc:
            raise RegistryError(
                f"the registry at {self.server} sent pool authorizations this client does not "
                f"understand ({exc.error_count()} schema errors)") from exc

    def pool_authorization(self, benchmark_id: int, pool_id: str) -> PoolAuthorization:
        """The authorization as the aggregator reads it: signed, with a (witnessed) checkpoint
        and its events' inclusion proofs."""
        response = self._send(
            "GET", f"{API_PREFIX}/benchmarks/{benchmark_id}/pool-authorizations/{pool_id}")
        try:
            return PoolAuthorization.model_validate_json(response.content)
        except ValidationError as exc:
            raise RegistryError(
                f"the registry's pool authorization {pool_id} does not parse "
                f"({exc.error_count()} schema errors)") from exc

    def submit_pooled_release(self, benchmark_id: int, *, sealed: bytes, token: str,
                              inputs: PoolInputs) -> PooledReleasePublic:
        """Send the aggregator's ``pooled.sealed`` (its exact bytes, sealed to the registry),
        ``pooled.token`` and the authorization's inputs; the registry verifies them before
        it opens the release or stores anything, and answers with the published release."""
        body = PooledReleaseCreate(sealed_release_b64=base64.b64encode(sealed).decode("ascii"),
                                   attestation_token=token,
                                   inputs=inputs.model_dump(mode="json"))
        return self._post(PooledReleasePublic,
                          f"{API_PREFIX}/benchmarks/{benchmark_id}/pooled-releases", body)

    def leaderboard(self, benchmark_id: int) -> Leaderboard:
        return self._get(Leaderboard, f"{API_PREFIX}/benchmarks/{benchmark_id}/leaderboard")

    def pooled_leaderboard(
        self,
        benchmark_id: int,
        *,
        metric: str | None = None,
        sites: tuple[int, ...] = (),
        all_metrics: bool = False,
    ) -> PooledLeaderboard:
        """Each model pooled over the sites the caller may read (issue 15)."""
        params: dict[str, Any] = {"all_metrics": "true" if all_metrics else "false"}
        if metric is not None:
            params["metric"] = metric
        if sites:
            params["site"] = list(sites)
        return self._get(
            PooledLeaderboard, f"{API_PREFIX}/benchmarks/{benchmark_id}/leaderboard/pooled", params
        )

    # -- runs -----------------------------------------------------------------------------------

    def report_run(self, run_id: str, body: RunReport) -> RunPublic:
        """Create or advance run ``run_id`` on the registry (PUT: retried, and idempotent since
        the registry ignores a report whose ``seq`` it has already passed)."""
        return self._put(RunPublic, f"{API_PREFIX}/runs/{run_id}", body)

    def report_runs(self, reports: tuple[RunReportItem, ...]) -> RunBatchPublic:
        """Several runs' reports in one request (one transaction on the registry). A POST, so
        never repeated behind the caller's back; repeating it is harmless (numbered reports)."""
        return self._post(RunBatchPublic, f"{API_PREFIX}/runs/reports",
                          RunReportBatch(reports=reports))

    def list_runs(
        self, benchmark_id: int | None = None, state: RunState | None = None
    ) -> tuple[RunPublic, ...]:
        params: dict[str, Any] = {}
        if benchmark_id:
            params["benchmark_id"] = benchmark_id
        if state:
            params["state"] = state
        return self._all(RunPublic, f"{API_PREFIX}/runs", params)

    def benchmark_progress(self, benchmark_id: int) -> BenchmarkProgress:
        return self._get(BenchmarkProgress, f"{API_PREFIX}/benchmarks/{benchmark_id}/progress")

    # -- inbox --------------------------------------------------------------------------------

    def inbox(self) -> Inbox:
        return self._get(Inbox, f"{API_PREFIX}/inbox")

    # -- audit --------------------------------------------------------------------------------

    def audit_events(self) -> tuple[AuditEventPublic, ...]:
        return self._all(AuditEventPublic, f"{API_PREFIX}/audit")

    def audit_verify(self) -> AuditVerification:
        return self._get(AuditVerification, f"{API_PREFIX}/audit/verify")

    # -- transparency log ---------------------------------------------------------------------

    def audit_checkpoint(self) -> CheckpointPublic:
        return self._get(CheckpointPublic, f"{API_PREFIX}/audit/checkpoint")

    def audit_consistency(self, first: int, second: int) -> ConsistencyProofPublic:
        return self._get(
            ConsistencyProofPublic,
            f"{API_PREFIX}/audit/consistency",
            {"first": first, "second": second},
        )

    def audit_inclusion(self, seq: int, tree_size: int | None = None) -> InclusionProofPublic:
        params = {"seq": seq} if tree_size is None else {"seq": seq, "tree_size": tree_size}
        return self._get(InclusionProofPublic, f"{API_PREFIX}/audit/inclusion", params)

    def audit_receipt(self, result_id: int) -> InclusionProofPublic:
        return self._get(InclusionProofPublic, f"{API_PREFIX}/audit/receipts/{result_id}")

    def audit_event_range(self, start: int, end: int) -> AuditEventRange:
        return self._get(
            AuditEventRange, f"{API_PREFIX}/audit/events", {"start": start, "end": end}
        )

    def audit_cosign(self, body: CosignatureCreate) -> CosignaturePublic:
        return self._post(CosignaturePublic, f"{API_PREFIX}/audit/cosignatures", body)
