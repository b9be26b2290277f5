"""The model store: versions, aliases, tags and verification records; no compiling.

:class:`ModelStore` keeps a version's canonical bytes (content-addressed, see
:mod:`scoring._registry.storage`), its schema, sample and the verification results it is
handed.  :class:`scoring.Registry` adds what needs the compiler: verification on
register, and compiled models on load.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import platformdirs
import sqlalchemy as sa

from .._bundle import Bundle, ModelSchema, bundle_manifest, sha256_hex
from .._drift import Profile
from .._parity import Verification
from .._stores import configured, is_remote, store_config
from ..errors import ConfigError, ModelNotFoundError, RegistryError, VerificationError
from . import db
from .runs import RunHistory
from .samples import sample_from_bytes, sample_to_bytes
from .schema import ModelVersion
from .storage import ArtifactStore

__all__ = ["ModelStore", "check_alias", "default_root", "parse_ref", "root_url"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_INSERT_ATTEMPTS = 20


def parse_ref(ref: str, version: int | None = None) -> tuple[str, str | int]:
    """``name@alias``, ``name@3``, ``name`` (latest), or ``name`` plus ``version``."""
    name, _, selector = ref.partition("@")
    _check_name(name, "model name")
    if version is not None:
        if selector:
            raise RegistryError(f"give either {ref!r} or version={version}, not both")
        return name, int(version)
    if not selector or selector == "latest":
        return name, "latest"
    return name, int(selector) if selector.isdigit() else selector


def _filename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


#: What SQLAlchemy URLs start with (``postgresql+psycopg://``, ``sqlite:///``): never
#: an artifact root.
_DATABASE_URL = re.compile(r"^(postgresql|postgres|mysql|mariadb|sqlite|mssql|oracle)(\+\w+)?://")


def _check_root(root: str, db_url: str | None) -> None:
    """Refuse, before touching anything, a database URL given as the artifact root and a
    remote root without a database."""
    if _DATABASE_URL.match(root):
        raise RegistryError(
            f"registry root {root!r} is a database URL: --registry (SCORING_HOME) takes "
            "the artifact root, a directory or fsspec URL; give the database with "
            "--registry-db (SCORING_REGISTRY_DB, db_url=)"
        )
    if db_url is None and is_remote(root):
        raise RegistryError(
            f"registry root {root!r} is remote and SQLite cannot live there: give the "
            "registry database with --registry-db (SCORING_REGISTRY_DB, db_url=), e.g. "
            "postgresql+psycopg://user@host/scoring"
        )


def check_alias(alias: str) -> None:
    """Refuse an alias that is no name, or one that would read as a version."""
    _check_name(alias, "alias")
    if alias.isdigit() or alias == "latest":
        raise RegistryError(f"alias {alias!r} is reserved: it would read as a version")


def _check_name(value: str, what: str) -> None:
    if not _NAME.match(value):
        raise RegistryError(
            f"{what} {value!r} is not valid: use letters, digits, '_', '.', '-' "
            "(starting with a letter or digit, at most 128 characters)"
        )


def root_url(uri: str | os.PathLike[str] | None) -> str:
    """The registry's artifact root: ``uri``, else ``$SCORING_HOME``, else the user's
    data directory (``~/.local/share/scoring`` on Linux, from platformdirs): never the
    current directory, where ``scoring models list`` run elsewhere would silently find
    an empty registry."""
    if uri is not None and not isinstance(uri, (str, os.PathLike)):
        # str() of anything else would name a folder after the object's repr
        raise ConfigError(
            f"registry: expected a folder, a URL or a Registry, got {type(uri).__name__} "
            f"{uri!r:.80}"
        )
    return str(uri or os.environ.get("SCORING_HOME") or default_root())


def default_root() -> str:
    """The per-user registry root used when none is named."""
    return platformdirs.user_data_dir("scoring", appauthor=False)


class ModelStore:
    """Model versions in a root directory or fsspec URL, metadata in a SQL database.

    ``uri``: the artifact root (default ``$SCORING_HOME``, else a per-user directory,
    see :func:`root_url`).
    ``db_url``: any SQLAlchemy URL (default ``$SCORING_REGISTRY_DB``, else SQLite in the
    root for local roots, in process memory for ``memory://`` roots); other remote roots
    need one, since SQLite cannot live in an object store.
    ``storage_options``: the root's fsspec options (see :mod:`scoring._stores`).
    """

    def __init__(
        self,
        uri: str | os.PathLike[str] | None = None,
        *,
        db_url: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ):
        root = root_url(uri)
        db_url = db_url or os.environ.get("SCORING_REGISTRY_DB") or None
        _check_root(root, db_url)
        with configured(store_config(storage_options, [root])):
            self.store = ArtifactStore(root)
        self.uri = root
        self.store.ensure_writable()
        if db_url is not None:
            self.engine = db.make_engine(db_url)
        elif self.store.is_local:
            self.engine = db.make_engine(f"sqlite:///{Path(self.store.root).resolve()}/registry.db")
        else:  # memory://, checked above: one database per root, shared in this process
            self.engine = db.make_engine("sqlite://", shared_key=self.store.uri(self.store.root))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r}, db={self.engine.url!r})"

    @property
    def runs(self) -> RunHistory:
        """The history of the jobs run against this registry."""
        return RunHistory(self.engine)

    # -- writing ------------------------------------------------------------------

    def add_version(
        self,
        name: str,
        data: bytes,
        schema: ModelSchema,
        *,
        verification: dict[str, Verification],
        sample: Any = None,
        reference: Profile | None = None,
        tags: Mapping[str, str] | None = None,
        description: str = "",
    ) -> ModelVersion:
        """Store canonical model bytes (see :mod:`scoring._bundle`) as the next version of
        ``name`` with what was verified about them and the ``reference`` profile of its
        sample (for drift); returns the new, immutable version."""
        _check_name(name, "model name")
        from .._frameworks import framework_named  # on use: listing loads no framework

        artifact = self.store.put(data, framework_named(schema.framework).artifact)
        sample_path = sample_sha = None
        if sample is not None:
            sample_bytes, filename = sample_to_bytes(sample)
            sample_path = self.store.put(sample_bytes, filename)
            sample_sha = sha256_hex(sample_bytes)
        row = {
            "name": name,
            "sha256": sha256_hex(data),
            "artifact_path": artifact,
            "sample_path": sample_path,
            "sample_sha256": sample_sha,
            "schema_json": schema.model_dump_json(),
            "description": description,
            "created_at": datetime.now(timezone.utc),
        }
        version = self._insert(row, dict(tags or {}), verification, reference)
        return self.get(name, version=version)

    def _insert(
        self,
        row: dict[str, Any],
        tags: dict[str, str],
        checks: dict[str, Verification],
        reference: Profile | None,
    ) -> int:
        """Take the next version number and record everything in one transaction."""
        for _ in range(_INSERT_ATTEMPTS):
            try:
                with self.engine.begin() as conn:
                    db.serialised(conn, f"scoring.registry.version:{row['name']}")
                    last = conn.execute(
                        sa.select(sa.func.max(db.versions.c.version)).where(
                            db.versions.c.name == row["name"]
                        )
                    ).scalar()
                    version = int(last or 0) + 1
                    result = conn.execute(db.versions.insert().values(**row, version=version))
                    vid = int(result.inserted_primary_key[0])  # type: ignore[index]
                    for key, value in tags.items():
                        conn.execute(db.tags.insert().values(version_id=vid, key=key, value=value))
                    self._write_checks(conn, vid, checks)
                    if reference is not None:
                        conn.execute(db.references.insert().values(
                            version_id=vid, profile_json=reference.model_dump_json()
                        ))  # fmt: skip
                return version
            except sa.exc.IntegrityError:  # another writer took the number: try the next
                continue
        raise RegistryError(f"could not allocate a version of {row['name']!r}: too much contention")

    @staticmethod
    def _write_checks(conn: Any, vid: int, checks: dict[str, Verification]) -> None:
        for device_type, check in checks.items():
            conn.execute(
                db.verifications.delete().where(
                    (db.verifications.c.version_id == vid)
                    & (db.verifications.c.device_type == device_type)
                )
            )
            conn.execute(
                db.verifications.insert().values(
                    version_id=vid,
                    device_type=device_type,
                    passed=check.passed,
                    result_json=check.model_dump_json(),
                )
            )

    def set_alias(self, name: str, alias: str, version: int, *, force: bool = False) -> None:
        """Point ``name@alias`` at ``version``; an unverified version needs ``force``."""
        check_alias(alias)
        mv = self.get(name, version=version)
        if not mv.verified and not force:
            failed = [
                f"{d}: {v.detail or f'max error {v.max_error:.3g}'}"
                for d, v in mv.verification.items()
                if not v.passed
            ]
            raise VerificationError(
                f"{mv.ref} failed parity verification ({'; '.join(failed) or 'never verified'});"
                f" run `scoring models verify {mv.ref}` or pass force=True to promote it anyway"
            )
        with self.engine.begin() as conn:
            key = (db.aliases.c.name == name) & (db.aliases.c.alias == alias)
            conn.execute(db.aliases.delete().where(key))
            conn.execute(db.aliases.insert().values(name=name, alias=alias, version=version))

    def delete_alias(self, name: str, alias: str) -> None:
        with self.engine.begin() as conn:
            key = (db.aliases.c.name == name) & (db.aliases.c.alias == alias)
            if conn.execute(db.aliases.delete().where(key)).rowcount == 0:
                raise ModelNotFoundError(f"model {name!r} has no alias {alias!r}")

    def set_tag(self, ref: str, key: str, value: str, *, version: int | None = None) -> None:
        mv = self.get(ref, version=version)
        with self.engine.begin() as conn:
            vid = self._version_id(conn, mv.name, mv.version)
            match = (db.tags.c.version_id == vid) & (db.tags.c.key == key)
            conn.execute(db.tags.delete().where(match))
            conn.execute(db.tags.insert().values(version_id=vid, key=key, value=str(value)))

    def delete_version(self, name: str, version: int) -> None:
        """Delete a version no alias points to (its artifact too, unless shared)."""
        with self.engine.begin() as conn:
            vid = self._version_id(conn, name, version)
            held = self._aliases_of(conn, name, version)
            if held:
                raise RegistryError(
                    f"{name}@{version} is the target of alias(es) {', '.join(held)}: "
                    "move or delete them first"
                )
            row = conn.execute(sa.select(db.versions).where(db.versions.c.id == vid)).one()
            conn.execute(db.tags.delete().where(db.tags.c.version_id == vid))
            conn.execute(db.verifications.delete().where(db.verifications.c.version_id == vid))
            conn.execute(db.references.delete().where(db.references.c.version_id == vid))
            conn.execute(db.versions.delete().where(db.versions.c.id == vid))
            stored = ((row.artifact_path, row.sha256), (row.sample_path, row.sample_sha256))
            for path, sha in stored:
                if path and not self._referenced(conn, sha):
                    self.store.delete(self.store.key_for(sha, _filename(path)))

    def _artifact_key(self, row: Any) -> str:
        return self.store.key_for(row.sha256, _filename(row.artifact_path))

    @staticmethod
    def _referenced(conn: Any, sha: str) -> bool:
        """Whether any version still uses bytes with this digest, as model or sample."""
        uses = (db.versions.c.sha256 == sha) | (db.versions.c.sample_sha256 == sha)
        return conn.execute(sa.select(db.versions.c.id).where(uses)).first() is not None

    # -- reading ------------------------------------------------------------------

    def get(self, ref: str, *, version: int | None = None) -> ModelVersion:
        """A version by ``name@alias``, ``name@3``, ``name`` (latest) or name plus version."""
        name, selector = parse_ref(ref, version)
        with self.engine.connect() as conn:
            number = self._resolve(conn, name, selector)
            return self._load_version(conn, name, number)

    def versions(self, name: str) -> list[ModelVersion]:
        with self.engine.connect() as conn:
            numbers = (
                conn.execute(
                    sa.select(db.versions.c.version)
                    .where(db.versions.c.name == name)
                    .order_by(db.versions.c.version)
                )
                .scalars()
                .all()
            )
            if not numbers:
                raise self._not_found(conn, name)
            return [self._load_version(conn, name, n) for n in numbers]

    def list(self) -> list[ModelVersion]:
        """The latest version of every model, by name."""
        with self.engine.connect() as conn:
            latest = conn.execute(
                sa.select(db.versions.c.name, sa.func.max(db.versions.c.version))
                .group_by(db.versions.c.name)
                .order_by(db.versions.c.name)
            ).all()
            return [self._load_version(conn, name, number) for name, number in latest]

    def record_verification(
        self, mv: ModelVersion, checks: dict[str, Verification]
    ) -> ModelVersion:
        """Record verification results for ``mv`` (one per device type, replacing any
        earlier one for that device type)."""
        with self.engine.begin() as conn:
            self._write_checks(conn, self._version_id(conn, mv.name, mv.version), checks)
        return self.get(mv.name, version=mv.version)

    def reference(self, mv: ModelVersion) -> Profile | None:
        """The profile of ``mv``'s sample taken at registration (None without a sample)."""
        with self.engine.connect() as conn:
            vid = self._version_id(conn, mv.name, mv.version)
            found = conn.execute(
                sa.select(db.references.c.profile_json).where(db.references.c.version_id == vid)
            ).scalar()
        return None if found is None else Profile.model_validate_json(found)

    def bundle(self, ref: str, *, version: int | None = None) -> Bundle:
        """The version as a checksummed payload a worker compiles without this registry."""
        mv = self.get(ref, version=version)
        manifest = bundle_manifest(mv.name, mv.version, mv.sha256, mv.schema, mv.created_at)
        # The choices its record verified, per device type: a worker holds any other
        # choice it makes to the native predictor first (scoring._cache).
        manifest["verified"] = {d: sorted(v.strategies) for d, v in mv.verification.items()
                                if v.passed}  # fmt: skip
        return Bundle(manifest=manifest, model_bytes=self.read(mv))

    # -- internals ----------------------------------------------------------------

    def _resolve(self, conn: Any, name: str, selector: str | int) -> int:
        if isinstance(selector, int):
            return selector
        if selector == "latest":
            query = sa.select(sa.func.max(db.versions.c.version)).where(db.versions.c.name == name)
            return self._number(conn, query, lambda: self._not_found(conn, name))
        query = sa.select(db.aliases.c.version).where(
            (db.aliases.c.name == name) & (db.aliases.c.alias == selector)
        )
        return self._number(conn, query, lambda: self._not_found(conn, name, alias=selector))

    @staticmethod
    def _number(conn: Any, query: Any, missing: Callable[[], ModelNotFoundError]) -> int:
        """The one number ``query`` selects, or ``missing()`` raised where it finds none."""
        found = conn.execute(query).scalar()
        if found is None:
            raise missing()
        return int(found)

    def _not_found(
        self, conn: Any, name: str, *, alias: str | None = None, version: int | None = None
    ) -> ModelNotFoundError:
        """What is missing, named as such, with the nearest names the registry holds."""
        names = list(conn.execute(sa.select(db.versions.c.name).distinct()).scalars())
        if name not in names:
            return ModelNotFoundError(
                f"no model named {name!r} in the registry {self.uri}{_suggest(name, names)}"
            )
        if alias is not None:
            held = conn.execute(sa.select(db.aliases.c.alias).where(db.aliases.c.name == name))
            aliases = sorted(held.scalars())
            return ModelNotFoundError(
                f"model {name!r} has no alias {alias!r} in the registry {self.uri}"
                f"{_suggest(alias, aliases)}"
            )
        held = conn.execute(sa.select(db.versions.c.version).where(db.versions.c.name == name))
        versions = ", ".join(str(v) for v in sorted(held.scalars()))
        return ModelNotFoundError(
            f"model {name!r} has no version {version} in {self.uri} (versions: {versions})"
        )

    def _version_id(self, conn: Any, name: str, version: int) -> int:
        query = sa.select(db.versions.c.id).where(
            (db.versions.c.name == name) & (db.versions.c.version == version)
        )
        return self._number(conn, query, lambda: self._not_found(conn, name, version=version))

    def _load_version(self, conn: Any, name: str, version: int) -> ModelVersion:
        vid = self._version_id(conn, name, version)
        row = conn.execute(sa.select(db.versions).where(db.versions.c.id == vid)).one()
        tags = conn.execute(
            sa.select(db.tags.c.key, db.tags.c.value).where(db.tags.c.version_id == vid)
        ).all()
        checks = (
            conn.execute(
                sa.select(db.verifications.c.result_json).where(
                    db.verifications.c.version_id == vid
                )
            )
            .scalars()
            .all()
        )
        verification = [Verification.model_validate_json(c) for c in checks]
        created = row.created_at
        return ModelVersion(
            name=name,
            version=version,
            artifact_uri=self.store.uri(self._artifact_key(row)),
            sha256=row.sha256,
            schema=ModelSchema.model_validate_json(row.schema_json),
            verification={v.device_type: v for v in verification},
            created_at=created if created.tzinfo else created.replace(tzinfo=timezone.utc),
            tags=dict(tags),
            description=row.description,
            aliases=sorted(self._aliases_of(conn, name, version)),
        )

    @staticmethod
    def _aliases_of(conn: Any, name: str, version: int) -> Sequence[str]:
        match = (db.aliases.c.name == name) & (db.aliases.c.version == version)
        return list(conn.execute(sa.select(db.aliases.c.alias).where(match)).scalars().all())

    def read(self, mv: ModelVersion) -> bytes:
        """The version's model bytes, refused unless they still have its sha256."""
        from .._frameworks import framework_named

        key = self.store.key_for(mv.sha256, framework_named(mv.schema.framework).artifact)
        return self.store.get(key, sha256=mv.sha256)

    def sample(self, mv: ModelVersion) -> Any:
        """The sample rows registered with ``mv`` (None when there were none)."""
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(db.versions.c.sample_path, db.versions.c.sample_sha256).where(
                    db.versions.c.id == self._version_id(conn, mv.name, mv.version)
                )
            ).one()
        if row.sample_path is None:
            return None
        # The key from the digest: rows written before keys were always relative may
        # hold the artifact's absolute path.
        key = self.store.key_for(row.sample_sha256, _filename(row.sample_path))
        data = self.store.get(key, sha256=row.sample_sha256)
        return sample_from_bytes(data, key)


def _suggest(wanted: str, known: list[str]) -> str:
    """``; did you mean 'x'?`` for a near name, else what there is (or nothing)."""
    close = difflib.get_close_matches(wanted, known, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f" (it holds: {', '.join(sorted(known)[:10])})" if known else " (it holds none)"
