"""``sealbench-server``: a thin shell over the library.

::

    sealbench-server init                         create the data directory, apply migrations,
                                                  generate the transparency log's signing key
    sealbench-server migrate                      apply pending migrations only (once per
                                                  deployment, before the replicas start)
    sealbench-server serve [--host H] [--port P]  run the API with uvicorn
    sealbench-server user add --email E [--admin] create a user; print its API token once
    sealbench-server user list                    every account, its state and live tokens
    sealbench-server user disable --email E       disable an account (tokens, JWTs, sessions)
    sealbench-server token list [--email E]       API tokens by id (never the tokens)
    sealbench-server token revoke --id N          revoke one API token
    sealbench-server audit verify                 recompute the audit chain and log tree
    sealbench-server key show                     print the log's origin and public keys
    sealbench-server key rotate                   replace the log's signing key

Settings come from ``SEALBENCH_SERVER_*`` variables (docs/server.md); ``--data-dir DIR``
overrides ``SEALBENCH_SERVER_DATA_DIR``. A command that finds no registry says which
``--data-dir`` to pass when the shell is a demo's (``SEALBENCH_CONFIG_DIR`` names the demo's
profiles, beside its registry) instead of suggesting ``init`` of a second, empty one. Exit
codes: 0 success, 1 a registry error (message on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from sealbench.crypto.note import VerifierKey
from sealbench.server.audit import verify_stored_log
from sealbench.server.db import Database, open_database
from sealbench.server.errors import AuditChainBrokenError, RegistryError
from sealbench.server.logkeys import ensure_log_key, publish_key, rotate_log_key
from sealbench.server.migrate import current_revision, head_revision, upgrade_to_head
from sealbench.server.poolkey import ensure_pool_key
from sealbench.server.services.accounts import (
    disable_user,
    find_token_id,
    list_tokens,
    list_users,
    revoke_token,
)
from sealbench.server.services.audit import published_keys, record_check
from sealbench.server.services.users import create_user
from sealbench.server.settings import ServerSettings

__all__ = ["main"]

log = logging.getLogger("sealbench.server")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sealbench-server", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks")
    parser.add_argument(
        "--data-dir", type=Path, default=None, metavar="DIR",
        help="the registry's data directory (database, log and pool keys); default "
        "$SEALBENCH_SERVER_DATA_DIR, else ./sealbench-data. A demo's registry is the "
        "'registry' folder of its work folder")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("init", help="create the data directory and apply migrations")
    sub.add_parser(
        "migrate",
        help="apply pending migrations and nothing else",
        description="Bring the database to the schema this version needs. Run it once per "
        "deployment (a release job) before the replicas start; 'serve' never migrates and "
        "refuses a database that is behind. Concurrent runs wait for each other (an advisory "
        "lock on PostgreSQL, the write lock on SQLite) and apply each migration once.",
    )
    serve = sub.add_parser("serve", help="run the API server")
    serve.add_argument("--host", default=None, help="bind address (default from settings)")
    serve.add_argument("--port", type=int, default=None, help="port (default from settings)")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port (each starts as slowly as the machine lets it; "
        "one that exits is replaced)",
    )
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
    user.add_parser("list", help="list every account: id, email, admin, state, live tokens")
    disable = user.add_parser(
        "disable",
        help="disable an account",
        description="Disable an account: its API tokens and OIDC JWTs are refused on every "
        "server process within the revocation check interval, and its dashboard sessions end "
        "at once. Its assets, results and audit history stay. Audited as 'user.disable'.",
    )
    disable.add_argument("--email", required=True, help="the account to disable")
    token = sub.add_parser("token", help="API tokens").add_subparsers(dest="action", required=True)
    tlist = token.add_parser("list", help="list API tokens by id (the tokens are never stored)")
    tlist.add_argument("--email", default=None, help="only this account's tokens")
    revoke = token.add_parser(
        "revoke",
        help="revoke one API token",
        description="Revoke an API token by the id 'token list' shows, or a leaked token by its "
        "value read from standard input (never from the command line, where the process list "
        "and shell history would show it): it is refused on every server process within the "
        "revocation check interval (SEALBENCH_SERVER_REVOCATION_CHECK_SECONDS, default 1 s), "
        "and dashboard sessions signed in with it end at once. Audited as 'token.revoke'.",
    )
    which = revoke.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", type=int, dest="token_id", help="the token's id")
    which.add_argument(
        "--stdin", action="store_true", help="read the token itself (sbt_...) from standard input"
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
        ensure_pool_key(settings, create=True)
        print(f"pool-release key in {settings.effective_pool_key_file}")
    finally:
        db.dispose()


def _migrate(settings: ServerSettings) -> None:
    if settings.database_url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    db = open_database(settings.effective_database_url)
    try:
        before, after = upgrade_to_head(db.engine)
    except SQLAlchemyError as exc:
        raise RegistryError(f"cannot migrate the registry database: {exc}") from exc
    finally:
        db.dispose()
    if before == after:
        print(f"database already at revision {after}")
    else:
        print(f"database migrated from revision {before} to {after}")


#: The client's variable naming its profiles' folder: in a demo's shell, ``<work>/config``,
#: beside the demo's registry ``<work>/registry`` (sealbench.client.demo).
_CLIENT_CONFIG_VARIABLE = "SEALBENCH_CONFIG_DIR"


def demo_registry(environ: Mapping[str, str]) -> Path | None:
    """The data directory of the demo whose shell this is (``environ`` names its profiles'
    folder), when it holds a registry; None otherwise."""
    config = environ.get(_CLIENT_CONFIG_VARIABLE)
    if not config:
        return None
    candidate = Path(config).expanduser().parent / "registry"
    return candidate if (candidate / "registry.sqlite3").is_file() else None


def no_registry_error(path: Path, environ: Mapping[str, str]) -> RegistryError:
    """No registry database at ``path``: which ``--data-dir`` holds the demo's registry when
    the shell is a demo's, else how to name an existing registry or create a new one."""
    demo = demo_registry(environ)
    if demo is not None:
        return RegistryError(
            f"no registry at {path}; this shell is set up for the demo whose registry is in "
            f"{demo}: pass --data-dir {shlex.quote(str(demo))} (e.g. 'sealbench-server "
            f"--data-dir {shlex.quote(str(demo))} user add --email ...')")
    return RegistryError(
        f"no registry at {path}: pass the data directory of an existing registry with "
        "--data-dir DIR (or SEALBENCH_SERVER_DATA_DIR), or create a new one here with "
        "'sealbench-server init'")


def _open_current(settings: ServerSettings) -> Database:
    """The registry database, refusing one that ``init`` has not created or migrated."""
    if settings.database_url is None:
        path = settings.data_dir / "registry.sqlite3"
        if not path.is_file():
            raise no_registry_error(path, os.environ)
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
            "run 'sealbench-server migrate' (or 'init') first"
        )
    return db


def _serve(settings: ServerSettings, host: str | None, port: int | None, workers: int) -> None:
    import uvicorn

    _open_current(settings).dispose()
    ensure_log_key(settings, create=settings.mode == "local")  # a clear error before uvicorn
    ensure_pool_key(settings, create=settings.mode == "local")
    bind_host = host or settings.host
    bind_port = port or settings.port
    # Re-validate with the chosen address so non-local mode refuses wildcards here too.
    checked = ServerSettings.model_validate(
        {**settings.model_dump(), "host": bind_host, "port": bind_port}
    )
    if workers > 1:
        from sealbench.server.workers import run_workers

        # Each worker process builds its own app from the same environment, under a supervisor
        # that lets a worker take as long as it needs to start (uvicorn's kills one that has
        # not answered its 5 s ping, which on a loaded machine is every one still importing).
        run_workers(uvicorn.Config(
            "sealbench.server.cli:app_from_environment",
            factory=True,
            host=checked.host,
            port=checked.port,
            workers=workers,
            log_level="warning",
        ))
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


def _when(value: datetime | None) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M:%S}Z"


def _user_list(settings: ServerSettings) -> None:
    db = _open_current(settings)
    try:
        with db.reader() as session:
            users = list_users(session)
    finally:
        db.dispose()
    print(f"{'id':>6}  {'email':<40} {'admin':<5} {'state':<30} {'tokens':>6}")
    for u in users:
        state = "active" if u.disabled_at is None else f"disabled {_when(u.disabled_at)}"
        admin = "yes" if u.is_admin else "no"
        print(f"{u.id:>6}  {u.email:<40} {admin:<5} {state:<30} {u.active_tokens:>6}")


def _user_disable(settings: ServerSettings, email: str) -> None:
    db = _open_current(settings)
    try:
        with db.writer() as session:
            user = disable_user(session, email=email, now=datetime.now(UTC))
    finally:
        db.dispose()
    print(f"disabled user {user.id} <{user.email}>; {user.active_tokens} token(s) now refused")


def _token_list(settings: ServerSettings, email: str | None) -> None:
    db = _open_current(settings)
    try:
        with db.reader() as session:
            tokens = list_tokens(session, email=email)
    finally:
        db.dispose()
    print(f"{'id':>6}  {'user':>6}  {'email':<40} {'created':<21} revoked")
    for t in tokens:
        print(
            f"{t.id:>6}  {t.user_id:>6}  {t.email:<40} {_when(t.created_at):<21} "
            f"{_when(t.revoked_at)}"
        )


def _token_revoke(settings: ServerSettings, token_id: int | None) -> None:
    secret = None if token_id is not None else sys.stdin.readline(4096).strip()
    db = _open_current(settings)
    try:
        with db.writer() as session:
            if secret is not None:
                token_id = find_token_id(session, secret)
            assert token_id is not None
            token = revoke_token(session, token_id=token_id, now=datetime.now(UTC))
    finally:
        db.dispose()
    print(f"revoked API token {token.id} of user {token.user_id} <{token.email}>")


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
        settings = ServerSettings() if args.data_dir is None else ServerSettings(
            data_dir=args.data_dir)
        if args.command == "init":
            _init(settings)
        elif args.command == "migrate":
            _migrate(settings)
        elif args.command == "serve":
            _serve(settings, args.host, args.port, args.workers)
        elif args.command == "user" and args.action == "add":
            _user_add(settings, args.email, args.admin)
        elif args.command == "user" and args.action == "list":
            _user_list(settings)
        elif args.command == "user":
            _user_disable(settings, args.email)
        elif args.command == "token" and args.action == "list":
            _token_list(settings, args.email)
        elif args.command == "token":
            _token_revoke(settings, args.token_id)
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
