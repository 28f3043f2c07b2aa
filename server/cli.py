"""``sealbench-server``: a thin shell over the library.

::

    sealbench-server init                         create the data directory, apply migrations,
                                                  generate the transparency log's signing key
    sealbench-server serve [--host H] [--port P]  run the API with uvicorn
    sealbench-server user add --email E [--admin] create a user; print its API token once
    sealbench-server audit verify                 recompute the audit chain and log tree
    sealbench-server key show                     print the log's origin and public keys
    sealbench-server key rotate                   replace the log's signing key

Settings come from ``SEALBENCH_SERVER_*`` variables (docs/server.md). Exit codes: 0 success,
1 a registry error (message on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from sealbench.crypto.note import VerifierKey
from sealbench.server.audit import verify_stored_log
from sealbench.server.db import Database, open_database
from sealbench.server.errors import AuditChainBrokenError, RegistryError
from sealbench.server.logkeys import ensure_log_key, publish_key, rotate_log_key
from sealbench.server.migrate import current_revision, head_revision, upgrade_to_head
from sealbench.server.services.audit import published_keys, record_check
from sealbench.server.services.users import create_user
from sealbench.server.settings import ServerSettings

__all__ = ["main"]

log = logging.getLogger("sealbench.server")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sealbench-server", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("init", help="create the data directory and apply migrations")
    serve = sub.add_parser("serve", help="run the API server")
    serve.add_argument("--host", default=None, help="bind address (default from settings)")
    serve.add_argument("--port", type=int, default=None, help="port (default from settings)")
    serve.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    user = sub.add_parser("user", help="manage users").add_subparsers(dest="action", required=True)
    add = user.add_parser(
        "add",
        help="create a user and print its API token once",
        description="Create a registry account and print its API token once (only its SHA-256 "
        "is stored: copy it now). Hand the token to the person, who stores it with "
        "'sealbench profile add NAME --server URL --token TOKEN'.",
    )
    add.add_argument(
        "--email",
        required=True,
        help="the account's email: its identity on the registry, shown to other parties as "
        "the owner of what it registers",
    )
    add.add_argument(
        "--admin",
        action="store_true",
        help="make the account a registry admin (approves benchmarks, reads the audit log); "
        "default: an ordinary account (authority, hospital or model owner)",
    )
    audit = sub.add_parser("audit", help="audit log").add_subparsers(dest="action", required=True)
    audit.add_parser("verify", help="recompute the hash chain and the transparency log's tree")
    key = sub.add_parser("key", help="the transparency log's signing key").add_subparsers(
        dest="action", required=True
    )
    key.add_parser("show", help="print the log's origin and its public (verifier) keys")
    key.add_parser("rotate", help="replace the signing key; the old public key stays published")
    return parser


def _init(settings: ServerSettings) -> None:
    if settings.database_url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    db = open_database(settings.effective_database_url)
    try:
        upgrade_to_head(db.engine)
        print(f"database at revision {current_revision(db.engine)}")
        key = ensure_log_key(settings, create=True)
        with db.writer() as session:
            publish_key(session, key, datetime.now(UTC))
        print(f"transparency log {key.name}, public key {key.verifier().to_string()}")
    finally:
        db.dispose()


def _open_current(settings: ServerSettings) -> Database:
    """The registry database, refusing one that ``init`` has not created or migrated."""
    if settings.database_url is None:
        path = settings.data_dir / "registry.sqlite3"
        if not path.is_file():
            raise RegistryError(f"no registry at {path}: run 'sealbench-server init' first")
    db = open_database(settings.effective_database_url)
    try:
        current = current_revision(db.engine)
    except SQLAlchemyError as exc:
        db.dispose()
        raise RegistryError(f"cannot read the registry database: {exc}") from exc
    if current != head_revision():
        db.dispose()
        raise RegistryError(
            f"database is at revision {current}, expected {head_revision()}: "
            "run 'sealbench-server init' first"
        )
    return db


def _serve(settings: ServerSettings, host: str | None, port: int | None, workers: int) -> None:
    import uvicorn

    _open_current(settings).dispose()
    ensure_log_key(settings, create=settings.mode == "local")  # a clear error before uvicorn
    bind_host = host or settings.host
    bind_port = port or settings.port
    # Re-validate with the chosen address so non-local mode refuses wildcards here too.
    checked = ServerSettings.model_validate(
        {**settings.model_dump(), "host": bind_host, "port": bind_port}
    )
    if workers > 1:
        # Each worker process builds its own app from the same environment.
        uvicorn.run(
            "sealbench.server.cli:app_from_environment",
            factory=True,
            host=checked.host,
            port=checked.port,
            workers=workers,
            log_level="warning",
        )
        return
    from sealbench.server.app import create_app

    uvicorn.run(create_app(checked), host=checked.host, port=checked.port, log_level="warning")


def app_from_environment() -> object:
    """The app built from ``SEALBENCH_SERVER_*`` (used by multi-worker ``serve``)."""
    from sealbench.server.app import create_app

    return create_app(ServerSettings())


def _user_add(settings: ServerSettings, email: str, admin: bool) -> None:
    db = _open_current(settings)
    try:
        with db.writer() as session:
            user, token = create_user(session, email=email, is_admin=admin, now=datetime.now(UTC))
    finally:
        db.dispose()
    print(f"created user {user.id} <{user.email}>{' (admin)' if user.is_admin else ''}")
    print("API token (shown once, store it now):", file=sys.stderr)
    print(token)


def _audit_verify(settings: ServerSettings) -> None:
    db = _open_current(settings)
    try:
        with db.reader() as session:
            try:
                count, error = verify_stored_log(session), None
            except AuditChainBrokenError as exc:
                count, error = exc.seq - 1, exc
        with db.writer() as session:
            record_check(session, actor_id=None, size=count, error=error, now=datetime.now(UTC))
    finally:
        db.dispose()
    if error is not None:
        raise error
    print(f"audit chain intact: {count} events")


def _key_show(settings: ServerSettings) -> None:
    db = _open_current(settings)
    try:
        with db.reader() as session:
            keys = published_keys(session)
    finally:
        db.dispose()
    if not keys:
        raise RegistryError("no log key is published yet: run 'sealbench-server init' first")
    print(f"transparency log {VerifierKey.from_string(keys[0].verifier).name}")
    for row in keys:
        state = "current" if row.retired_at is None else f"retired {row.retired_at:%Y-%m-%d}"
        print(f"{row.verifier}  ({state})")


def _key_rotate(settings: ServerSettings) -> None:
    db = _open_current(settings)
    try:
        old, new = rotate_log_key(settings, db, datetime.now(UTC))
    finally:
        db.dispose()
    print(f"log key rotated: {old.label} retired, {new.label} signs from now on")
    print(f"new public key {new.to_string()}")
    print("restart every server process so that it loads the new key", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    try:
        settings = ServerSettings()
        if args.command == "init":
            _init(settings)
        elif args.command == "serve":
            _serve(settings, args.host, args.port, args.workers)
        elif args.command == "user":
            _user_add(settings, args.email, args.admin)
        elif args.command == "key":
            _key_show(settings) if args.action == "show" else _key_rotate(settings)
        else:
            _audit_verify(settings)
    except ValidationError as exc:
        print(f"sealbench-server: invalid settings: {exc}", file=sys.stderr)
        return 1
    except RegistryError as exc:
        if args.verbose:
            log.exception("registry error")
        print(f"sealbench-server: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
