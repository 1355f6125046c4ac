"""Database URLs and engines, and bringing a database's schema to the newest revision.

``sqlite:///PATH`` (the embedded default: ``$MLMS_HOME/index.db``) or ``postgresql://USER:PASS@
HOST:PORT/NAME`` (through psycopg 3). SQLite runs in WAL mode, so readers never wait for the
writer, and with a busy timeout, so that processes sharing the file (the UI, ``mlms eval``, a
child agent) take turns to write instead of failing.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, create_engine, event, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, OperationalError

from mlms.config import mlms_home
from mlms.errors import InvalidArgument, StoreError, Unavailable
from mlms.reasons import short_reason

if TYPE_CHECKING:  # Alembic is imported only to migrate
    from alembic.config import Config

#: The newest migration under ``migrations/versions``: a database already there opens without
#: importing Alembic.
HEAD = "0002"
SQLITE_FILE = "index.db"
#: A writer waits this long for another process's write to end before failing.
BUSY_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 5
#: Any number held by every mlms process that migrates a PostgreSQL database, so that two
#: servers starting together do not both create the tables.
_MIGRATION_LOCK = 0x6D6C6D73
#: Alembic keeps the running migration in module globals, so two threads of one process (a
#: server and an embedded client opening their indexes together) must not migrate at once.
_MIGRATING = threading.Lock()


def default_url() -> str:
    return f"sqlite:///{mlms_home() / SQLITE_FILE}"


def database_url(given: str | None = None) -> str:
    """``given``, else ``MLMS_DATABASE``, else SQLite under ``$MLMS_HOME``."""
    return given or os.environ.get("MLMS_DATABASE") or default_url()


def url_for(store: object, given: str | None = None) -> str:
    """The index of ``store``: ``given``, else ``MLMS_DATABASE``, else SQLite beside a local
    store (``$MLMS_HOME/index.db`` beside ``$MLMS_HOME/store``), else under ``$MLMS_HOME``."""
    from mlms.store.local import LocalStore

    if given or os.environ.get("MLMS_DATABASE") or not isinstance(store, LocalStore):
        return database_url(given)
    return f"sqlite:///{store.root.parent / SQLITE_FILE}"


def shown(url: str) -> str:
    """The URL without its password, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url.split("@")[-1]


def create(url: str) -> Engine:
    """An engine for ``url``; a bad URL is one InvalidArgument line."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        parsed = None
    backend = parsed.get_backend_name() if parsed is not None else ""
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise InvalidArgument(
                f"database {url!r}: expected a file, sqlite:///PATH (a memory database would "
                "be one per connection)"
            )
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            parsed.set(database=str(Path(parsed.database).expanduser())),
            connect_args={"timeout": BUSY_TIMEOUT_S, "check_same_thread": False},
            pool_size=8,
            max_overflow=8,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if backend == "postgresql":
        return create_engine(
            parsed.set(drivername="postgresql+psycopg"),
            connect_args={"connect_timeout": CONNECT_TIMEOUT_S},
            pool_size=8,
            max_overflow=24,
            pool_pre_ping=True,
        )
    raise InvalidArgument(
        f"database {shown(url)!r}: expected sqlite:///PATH or postgresql://USER@HOST:PORT/NAME"
    )


#: Between tries at switching a new SQLite index to WAL while another connection writes it.
WAL_RETRY_S = 0.05


def _sqlite_pragmas(connection, _record) -> None:
    cursor = connection.cursor()
    # The switch to WAL needs the file to itself, and SQLite answers "locked" at once, without
    # waiting out the busy timeout, while another connection writes (a second server worker
    # migrating the index it is creating): tried again until then.
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(WAL_RETRY_S)
    cursor.execute("PRAGMA synchronous=NORMAL")  # WAL keeps the database whole without FULL
    cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    cursor.close()


def migrate(engine: Engine) -> bool:
    """Bring the schema to ``HEAD``; True when this call created or upgraded it."""
    if revision(engine) == HEAD:
        return False
    from alembic import command

    with _MIGRATING, engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(select(text(f"pg_advisory_xact_lock({_MIGRATION_LOCK})")))
        else:  # SQLite: one writer at a time from here on, so only one process migrates
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        if _revision(connection) == HEAD:  # another process migrated while this one waited
            return False
        command.upgrade(alembic_config(connection), "head")
    return True


def alembic_config(connection: Connection) -> Config:
    """Alembic's configuration for this package's migrations, run on ``connection``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    config.attributes["connection"] = connection
    return config


def revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return _revision(connection)


def _revision(connection) -> str | None:
    if not inspect(connection).has_table("alembic_version"):
        return None
    return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


@contextlib.contextmanager
def errors(url: str):
    """The database's failures as mlms errors naming it: unreachable or down is Unavailable,
    anything else a StoreError. A unique key's refusal stays an IntegrityError: callers decide
    what it means."""
    try:
        yield
    except IntegrityError:
        raise
    except OperationalError as exc:
        raise Unavailable(f"database {shown(url)} is unavailable: {_reason(exc)}") from exc
    except DBAPIError as exc:
        raise StoreError(f"database {shown(url)} failed: {_reason(exc)}") from exc


def _reason(exc: DBAPIError) -> str:
    return short_reason(exc.orig) if exc.orig is not None else short_reason(exc)
