"""Registry metadata in a SQL database through SQLAlchemy (SQLite by default).

Versions are numbered per name inside one write transaction, after the writers of
that name are serialised (:func:`serialised`): on SQLite every transaction starts with
``BEGIN IMMEDIATE`` (the writer lock is taken before the next number is read, and other
processes wait up to the busy timeout); on PostgreSQL a transaction-scoped advisory lock
per name does the same, and one more guards creating the tables, which PostgreSQL does
not make safe for concurrent sessions (two ``CREATE TABLE`` of one name collide on its
catalog).  On other servers the unique ``(name, version)`` key turns a race into an
IntegrityError that the caller retries.
"""

from __future__ import annotations

import threading
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.pool import StaticPool

from ..errors import RegistryAccessError, translated

__all__ = [
    "SCHEMA_VERSION", "aliases", "metadata", "references", "runs", "serialised", "tags",
    "verifications", "versions",
]  # fmt: skip

#: Bumped when the tables change; stored in the ``registry_meta`` table.
SCHEMA_VERSION = 1

metadata = sa.MetaData()

meta = sa.Table(
    "registry_meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(256), nullable=False),
)

versions = sa.Table(
    "model_versions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("artifact_path", sa.Text, nullable=False),
    sa.Column("sample_path", sa.Text, nullable=True),
    sa.Column("sample_sha256", sa.String(64), nullable=True),
    sa.Column("schema_json", sa.Text, nullable=False),
    sa.Column("description", sa.Text, nullable=False, default=""),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.UniqueConstraint("name", "version", name="uq_name_version"),
)

aliases = sa.Table(
    "model_aliases",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("alias", sa.String(128), primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
)

tags = sa.Table(
    "version_tags",
    metadata,
    sa.Column("version_id", sa.Integer, sa.ForeignKey("model_versions.id"), primary_key=True),
    sa.Column("key", sa.String(256), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

verifications = sa.Table(
    "verifications",
    metadata,
    sa.Column("version_id", sa.Integer, sa.ForeignKey("model_versions.id"), primary_key=True),
    sa.Column("device_type", sa.String(32), primary_key=True),
    sa.Column("passed", sa.Boolean, nullable=False),
    sa.Column("result_json", sa.Text, nullable=False),
)

#: Every ``scoring run`` of a job, whatever its outcome (see :mod:`.runs`).  Tables added
#: after schema 1 are created where missing and older versions ignore them: no bump.
runs = sa.Table(
    "job_runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job", sa.String(128), nullable=False, index=True),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("record_json", sa.Text, nullable=False),
)

#: A version's reference profile of its sample (see :mod:`scoring._drift`), for drift.
references = sa.Table(
    "version_references",
    metadata,
    sa.Column("version_id", sa.Integer, sa.ForeignKey("model_versions.id"), primary_key=True),
    sa.Column("profile_json", sa.Text, nullable=False),
)

_MEMORY_ENGINES: dict[str, Engine] = {}
_MEMORY_LOCK = threading.Lock()


def make_engine(url: str, *, shared_key: str | None = None) -> Engine:
    """An engine with its tables created; ``shared_key`` shares an in-memory database."""
    if shared_key is not None:
        with _MEMORY_LOCK:
            if shared_key not in _MEMORY_ENGINES:
                _MEMORY_ENGINES[shared_key] = _create(
                    "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
                )
            return _MEMORY_ENGINES[shared_key]
    extra: dict[str, Any] = {}
    if url.startswith("sqlite"):
        extra["connect_args"] = {"timeout": 120}
    return _create(url, **extra)


def _create(url: str, **kwargs: Any) -> Engine:
    with translated("registry database", f"cannot use registry database {url!r}"):
        engine = sa.create_engine(url, **kwargs)
    if engine.dialect.name == "sqlite":
        _serialise_sqlite_writers(engine)
    fix = (
        "check that its directory is writable, or give a database server with --registry-db"
        if engine.dialect.name == "sqlite"
        else "check the server, the database name and the credentials in the URL"
    )
    with (
        translated("registry database", f"cannot open registry database {engine.url!r}", fix=fix),
        engine.begin() as conn,
    ):
        serialised(conn, "scoring.registry.tables")
        metadata.create_all(conn)
        found = conn.execute(sa.select(meta.c.value).where(meta.c.key == "schema")).scalar()
        if found is None:
            conn.execute(meta.insert().values(key="schema", value=str(SCHEMA_VERSION)))
        elif int(found) > SCHEMA_VERSION:
            raise RegistryAccessError(
                f"registry database {url!r} has schema {found}, newer than this version "
                f"of scoring understands ({SCHEMA_VERSION}); upgrade scoring"
            )
    return engine


def serialised(conn: sa.Connection, key: str) -> None:
    """Make the other transactions that call this with ``key`` wait until this one ends
    (SQLite's writers wait for each other already)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": key})


def _serialise_sqlite_writers(engine: Engine) -> None:
    """Let SQLAlchemy, not the sqlite3 module, issue BEGIN, and make it IMMEDIATE."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
