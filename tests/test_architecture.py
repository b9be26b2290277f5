"""``docs/architecture.md`` names every module of the product, and only those."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_architecture_names_every_module_and_only_those() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    listed = re.findall(r"^\| `(scoring/[^`]+)` \|", text, flags=re.MULTILINE)
    modules = sorted(
        str(p.relative_to(ROOT))
        for pattern in ("*.py", "*.cpp")
        for p in (ROOT / "scoring").rglob(pattern)
    )
    assert len(listed) == len(set(listed)), "a module listed twice"
    assert sorted(listed) == modules, {
        "missing from docs/architecture.md": sorted(set(modules) - set(listed)),
        "listed but gone": sorted(set(listed) - set(modules)),
    }
