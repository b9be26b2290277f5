"""What the product deletes or replaces outside its output staging: only what it wrote.

``scoring examples`` and the demo write folders afresh on every call; a user's folder of
the same name is refused by name and left byte for byte (the report: ``scoring examples
.`` wiped a project's own ``features/``).  The output's staging, files and lease are
covered where they are written (test_rerun_settings, test_publication, test_lease).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from scoring._journal.owned import MARKER, fresh_folder
from scoring.cli import app
from scoring.errors import OutputError

runner = CliRunner()


@pytest.mark.parametrize("part", ["registry", "features", "applications"])
def test_examples_refuse_a_users_folder_and_leave_it_whole(tmp_path: Path, part: str) -> None:
    mine = tmp_path / part / "mine.parquet"
    mine.parent.mkdir()
    mine.write_bytes(b"the user's own")
    result = runner.invoke(app, ["examples", str(tmp_path), "--rows", "100"])
    assert result.exit_code == 1, result.output
    said = result.output.strip().splitlines()[-1]
    assert str(tmp_path / part) in said and "not written by scoring examples" in said
    assert mine.read_bytes() == b"the user's own"
    others = {"registry", "features", "applications"} - {part}
    assert not any((tmp_path / o).exists() for o in others), "refused before writing any"


def test_examples_replace_their_own_folders(tmp_path: Path) -> None:
    for date in ("2026-11-20", "2026-11-21"):
        result = runner.invoke(app, ["examples", str(tmp_path), "--rows", "100", "--date", date])
        assert result.exit_code == 0, result.output
    dates = sorted(p.name for p in (tmp_path / "features").iterdir() if p.name != MARKER)
    assert dates == ["date=2026-11-21"], "the earlier call's partition went with its folder"


@pytest.mark.parametrize("planted", ["file", "symlink", "foreign marker", "empty marker"])
def test_a_fresh_folder_never_removes_what_another_wrote(tmp_path: Path, planted: str) -> None:
    target, outside = tmp_path / "demo", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    if planted == "file":
        target.write_text("a file")
    elif planted == "symlink":
        target.symlink_to(outside, target_is_directory=True)
    else:
        target.mkdir()
        (target / "data.csv").write_text("x")
        (target / MARKER).write_text(
            '{"written_by": "someone"}' if planted == "foreign marker" else ""
        )
    with pytest.raises(OutputError, match="demo"):
        fresh_folder(target, owner="scoring demo")
    assert (outside / "keep.txt").read_text() == "keep"
    assert target.exists()
