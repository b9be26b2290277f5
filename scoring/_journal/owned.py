"""Folders the product writes whole and writes afresh on its next call (the examples'
registry and inputs, the demo's data): each holds a marker naming the command that
wrote it, and only a folder with that marker, or an empty one, is ever removed.  A folder
of the same name that a user made is refused by name, never deleted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..errors import OutputError

__all__ = ["MARKER", "check_replaceable", "fresh_folder"]

MARKER = ".scoring-owner"


def fresh_folder(path: Path, *, owner: str) -> Path:
    """``path`` as an empty folder marked as written by ``owner`` (a command's name):
    its previous contents removed only when ``owner`` wrote them."""
    if check_replaceable(path, owner=owner):
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).write_text(json.dumps({"written_by": owner}) + "\n")
    return path


def check_replaceable(path: Path, *, owner: str) -> bool:
    """Refuse a ``path`` that ``owner`` may not replace; True when it has contents to
    remove (``owner``'s own)."""
    if path.is_symlink() or path.is_file():
        raise OutputError(
            f"{path} is not a folder {owner} wrote; remove it or choose another place"
        )
    if path.is_dir() and any(path.iterdir()):
        if _owner(path) != owner:
            raise OutputError(
                f"{path} exists and was not written by {owner} (no {MARKER} file of its "
                "own in it), so it is left as it is; choose another folder or move it away"
            )
        return True
    return False


def _owner(path: Path) -> str | None:
    marker = path / MARKER
    if not marker.is_file() or marker.is_symlink():
        return None
    try:
        return str(json.loads(marker.read_text())["written_by"])
    except (ValueError, KeyError, TypeError):
        return None
