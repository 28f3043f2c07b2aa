"""The registry's wire schemas (pydantic v2, frozen, no unknown fields), split by direction:
``*Create``/``*Update`` come in, ``*Public`` go out. They import only pydantic, so clients can
use them without the server's dependencies."""

from sealbench.server.schemas.assets import (
    AssetKind,
    CoordinatesPublic,
    CoordinatesUpdate,
    DatasetCreate,
    DatasetPublic,
    ModelCreate,
    ModelPublic,
)
from sealbench.server.schemas.associations import (
    AssociationCreate,
    AssociationDecision,
    AssociationPublic,
    AssociationStatus,
    InitiatorRole,
)
from sealbench.server.schemas.audit import AuditEventPublic, AuditVerification
from sealbench.server.schemas.benchmarks import (
    BenchmarkCreate,
    BenchmarkLeaderboardUpdate,
    BenchmarkPublic,
    BenchmarkState,
    BenchmarkStateUpdate,
)
from sealbench.server.schemas.budgets import (
    BudgetDebitPublic,
    DatasetBudget,
    ReleaseCostPublic,
)
from sealbench.server.schemas.common import ErrorBody, ErrorDetail, Health, Page, VersionInfo
from sealbench.server.schemas.grants import GrantsReport, GrantsStatus
from sealbench.server.schemas.inbox import Inbox, InboxEvaluation, InboxLink, ReleaseTerms
from sealbench.server.schemas.results import (
    Leaderboard,
    LeaderboardEntry,
    ResultCreate,
    ResultPublic,
)
from sealbench.server.schemas.users import UserPublic

__all__ = [
    "AssetKind",
    "AssociationCreate",
    "AssociationDecision",
    "AssociationPublic",
    "AssociationStatus",
    "AuditEventPublic",
    "AuditVerification",
    "BenchmarkCreate",
    "BenchmarkLeaderboardUpdate",
    "BenchmarkPublic",
    "BenchmarkState",
    "BenchmarkStateUpdate",
    "BudgetDebitPublic",
    "CoordinatesPublic",
    "CoordinatesUpdate",
    "DatasetBudget",
    "DatasetCreate",
    "DatasetPublic",
    "ErrorBody",
    "ErrorDetail",
    "GrantsReport",
    "GrantsStatus",
    "Health",
    "Inbox",
    "InboxEvaluation",
    "InboxLink",
    "InitiatorRole",
    "Leaderboard",
    "LeaderboardEntry",
    "ModelCreate",
    "ModelPublic",
    "Page",
    "ReleaseCostPublic",
    "ReleaseTerms",
    "ResultCreate",
    "ResultPublic",
    "UserPublic",
    "VersionInfo",
]
