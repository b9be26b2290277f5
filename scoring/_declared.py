"""Models as code: a folder of TOML files (``models/``), one per registered model, and
the changes that make a registry match them (``scoring models apply``).

::

    name = "churn"
    source = "../examples/models/churn.ubj"   # a model file or Spark ML folder, or models:/...
    sample = "../examples/models/churn-sample.parquet"  # verified on; the drift reference
    aliases = ["production"]
    tags = { team = "growth" }
    description = "monthly churn, XGBoost"

A model with several live versions (a champion and a challenger) lists them instead,
each with the same keys but ``name``::

    name = "churn"
    [[versions]]
    source = "../examples/models/churn-1.ubj"
    aliases = ["production"]
    [[versions]]
    source = "../examples/models/churn-2.ubj"
    aliases = ["challenger"]

Relative paths are read from the file's folder.  Applying a file registers each source
unless a version of its name already holds the same model (the same canonical bytes,
compared by sha256), so a second apply changes nothing; then each alias it names points
at that version (the verification gate still decides: an alias is never moved to a
version that failed it), aliases of that model it no longer names are removed, and its
tags are set on that version.  Models the files do not name are left as they are.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ._bundle import sha256_hex
from ._catalog import Registry
from ._frameworks import dump_model, import_model, is_mlflow_ref, load_mlflow_model, model_object
from ._registry import check_alias
from .errors import (
    ConfigError,
    JobFileError,
    ModelNotFoundError,
    RegistryError,
    VerificationError,
    file_key_problem,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Change", "Declared", "Version", "apply", "changes", "declared", "plan"]


class Version(BaseModel):
    """One version a model file declares."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: A model file or saved Spark ML folder (relative to the file, or an object-store
    #: URL), or an MLflow reference.
    source: str
    sample: str | None = None  # Parquet rows to verify on (relative to the file)
    aliases: list[str] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)
    description: str = ""
    trusted: bool = False  # a pickle file: its code runs on load

    @field_validator("aliases")
    @classmethod
    def _names(cls, aliases: list[str]) -> list[str]:
        """Refused as the file is read, as the registry would refuse it (not partway)."""
        for alias in aliases:
            try:
                check_alias(alias)
            except RegistryError as exc:
                raise ValueError(str(exc)) from None
        return aliases


class Declared(BaseModel):
    """One file of ``models/``: a model's name and its versions (one given at the top
    level, or several under ``[[versions]]``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    versions: list[Version] = Field(min_length=1)
    file: str = ""  # where it was read (set by :func:`declared`)

    @model_validator(mode="before")
    @classmethod
    def _one_version(cls, data: Any) -> Any:
        """The top-level keys of a file declaring one version, as that version."""
        if not isinstance(data, dict) or "versions" in data:
            return data
        fields = set(Version.model_fields)
        version = {k: v for k, v in data.items() if k in fields}
        return {**{k: v for k, v in data.items() if k not in fields}, "versions": [version]}

    @model_validator(mode="after")
    def _aliases_once(self) -> Declared:
        named = [a for v in self.versions for a in v.aliases]
        twice = next((a for a in named if named.count(a) > 1), None)
        if twice is not None:
            raise ValueError(f"alias {twice!r} is given to two versions; give it to one")
        return self


@dataclass(frozen=True)
class Change:
    """One change that makes the registry match the files."""

    model: str
    action: str  # register | alias | unalias | tag
    detail: str

    def __str__(self) -> str:
        return f"{self.model}: {self.action} {self.detail}"


def declared(folder: str | os.PathLike[str]) -> list[Declared]:
    """Every ``*.toml`` of ``folder``, validated, relative paths read from it; a name
    declared twice is refused naming both files."""
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"models folder {str(root)!r} does not exist")
    found: dict[str, Declared] = {}
    for path in sorted(root.glob("*.toml")):
        entry = _read(path)
        if entry.name in found:
            raise JobFileError(
                f"model {entry.name!r} is declared twice: {found[entry.name].file!r} and "
                f"{str(path)!r}; keep one"
            )
        found[entry.name] = entry
    if not found:
        raise ConfigError(f"models folder {str(root)!r} holds no *.toml file")
    return list(found.values())


def _read(path: Path) -> Declared:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise JobFileError(f"model file {str(path)!r} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise JobFileError(f"model file {str(path)!r} is not UTF-8 text (byte {exc.start}): "
                           "save it as UTF-8") from None  # fmt: skip
    try:
        entry = Declared.model_validate({**data, "file": str(path)})
    except ValidationError as exc:
        loc = list(exc.errors()[0]["loc"])
        if "versions" not in data and loc[:2] == ["versions", 0]:
            loc = loc[2:]  # a one-version file's keys are its top level
        key, reason = file_key_problem(exc, loc=loc)
        raise JobFileError(f"model file {str(path)!r}, key {key!r}: {reason}") from None
    here = path.absolute().parent
    versions = [_anchored(v, here) for v in entry.versions]
    for version in versions:
        _check_sample(version, path)
    return entry.model_copy(update={"versions": versions})


def _check_sample(version: Version, path: Path) -> None:
    """A local sample that is no Parquet file is refused with its model file, before
    any change is made (not by the register that would read it)."""
    sample = version.sample
    if sample is None or "://" in sample:
        return
    try:
        pq.read_schema(sample)
    except (OSError, pa.ArrowException) as exc:
        raise JobFileError(
            f"model file {str(path)!r}, key 'sample': {sample!r} is not a readable Parquet "
            f"file ({str(exc).splitlines()[0]}); point it at Parquet rows of the model's "
            "features"
        ) from None


def _anchored(version: Version, here: Path) -> Version:
    """``version`` with its relative paths read from ``here`` (URLs stay as they are)."""
    update: dict[str, Any] = {}
    if not is_mlflow_ref(version.source) and "://" not in version.source:
        update["source"] = str(here / os.path.expanduser(version.source))
    if version.sample is not None and "://" not in version.sample:
        update["sample"] = str(here / os.path.expanduser(version.sample))
    return version.model_copy(update=update)


def changes(registry: Registry, entries: list[Declared], *, dry_run: bool) -> Iterator[Change]:
    """Each change that makes the registry match ``entries``, made as it is yielded
    (``dry_run``: none made).  An alias the verification gate refuses stops it with
    that error, after the changes before it (each is whole: a rerun goes on from
    there)."""
    for entry in entries:
        yield from _changes(registry, entry, dry_run=dry_run)


def plan(registry: Registry, entries: list[Declared]) -> list[Change]:
    """The changes :func:`apply` would make, none made."""
    return list(changes(registry, entries, dry_run=True))


def apply(registry: Registry, entries: list[Declared]) -> list[Change]:
    """Make the registry match ``entries``; the changes made."""
    return list(changes(registry, entries, dry_run=False))


def _changes(registry: Registry, entry: Declared, *, dry_run: bool) -> Iterator[Change]:
    """A model file's changes: each version registered where none holds its bytes, its
    aliases and tags set; then the model's aliases no version names removed."""
    current = _aliases(registry, entry.name)
    for declared_version in entry.versions:
        yield from _version_changes(registry, entry, declared_version, current,
                                    dry_run=dry_run)  # fmt: skip
    named = {a for v in entry.versions for a in v.aliases}
    for alias in sorted(set(current) - named):
        yield Change(entry.name, "unalias", f"{alias} (was version {current[alias]})")
        if not dry_run:
            registry.delete_alias(entry.name, alias)


def _version_changes(
    registry: Registry, entry: Declared, declared_version: Version, current: dict[str, int],
    *, dry_run: bool,
) -> Iterator[Change]:  # fmt: skip
    spec = declared_version
    sha256 = _canonical(entry, spec)
    version = _holding(registry, entry.name, sha256)
    if version is None:
        yield Change(entry.name, "register", f"{_short(spec.source)} (sha256 {sha256[:12]})")
        if dry_run:
            version = -1  # the version the register makes; its aliases follow it
        else:
            version = registry.register(entry.name, spec.source, sample=spec.sample,
                                        tags=spec.tags, description=spec.description,
                                        trusted=spec.trusted).version  # fmt: skip
    shown = "the new version" if version < 0 else f"version {version}"
    for alias in spec.aliases:
        if current.get(alias) == version:
            continue
        yield Change(entry.name, "alias", f"{alias} -> {shown}")
        if not dry_run:
            _promote(registry, entry, alias, version)
    if version < 0:
        return  # registered with its tags
    tags = registry.get(entry.name, version=version).tags
    for key, value in sorted(spec.tags.items()):
        if tags.get(key) != value:
            yield Change(entry.name, "tag", f"{key}={value} on {shown}")
            if not dry_run:
                registry.set_tag(entry.name, key, value, version=version)


def _promote(registry: Registry, entry: Declared, alias: str, version: int) -> None:
    try:
        registry.set_alias(entry.name, alias, version)
    except VerificationError as exc:
        raise VerificationError(
            f"{entry.file}: {exc}; the alias {alias!r} stays where it was"
        ) from None


def _canonical(entry: Declared, version: Version) -> str:
    """The sha256 of the model's canonical bytes: what the registry stores and keys a
    version by."""
    source: Any = version.source
    if is_mlflow_ref(source):
        source = load_mlflow_model(source, trusted=version.trusted).model
    elif "://" not in source and not Path(source).exists():  # a URL: its reader says
        raise ConfigError(f"{entry.file}: model source {version.source!r} does not exist")
    model = model_object(source, trusted=version.trusted)
    import_model(model)  # an unsupported model is refused before anything is stored
    return sha256_hex(dump_model(model))


def _holding(registry: Registry, name: str, sha256: str) -> int | None:
    """The newest version of ``name`` holding those bytes, if any."""
    try:
        versions = registry.versions(name)
    except ModelNotFoundError:
        return None
    held = [mv.version for mv in versions if mv.sha256 == sha256]
    return max(held) if held else None


def _aliases(registry: Registry, name: str) -> dict[str, int]:
    try:
        return {a: mv.version for mv in registry.versions(name) for a in mv.aliases}
    except ModelNotFoundError:
        return {}


def _short(source: str) -> str:
    return source if is_mlflow_ref(source) or "://" in source else os.path.relpath(source)
