"""The documents point at what is there: every relative link of the README, docs/ and the benchmarks' README and
RESULTS names a file of the repository, and its ``#anchor`` a heading of that file (GitHub's slug); every code
path they name in backticks (``a/b.py``) exists. HISTORY.md is a dated record, read as it was written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = sorted([ROOT / "README.md", ROOT / "benchmarks" / "README.md", ROOT / "benchmarks" / "RESULTS.md",
                    *(ROOT / "docs").glob("*.md")])


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken(document: Path) -> list[str]:
    text, found = document.read_text(), []
    prose = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))  # code is not a link
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        dest = (document.parent / path).resolve() if path else document
        if not dest.exists():
            found.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in {
                slug(h) for h in re.findall(r"^#+ (.*)$", dest.read_text(), re.M)}:
            found.append(f"{target}: no such heading")
    for path in re.findall(r"`([\w./-]+/[\w.-]+\.py)`", text):
        if not (ROOT / path).exists() and not (document.parent / path).exists():
            found.append(f"`{path}`: no such file")
    return found


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(ROOT)))
def test_links_and_code_paths_name_what_is_there(document):
    assert not broken(document), broken(document)


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# Two words\n[ok](a.md#two-words) [gone](b.md) [off](a.md#three) `x/y.py`\n"
                                   "`GATES[\"k\"](2)` is code, not a link\n")
    assert broken(tmp_path / "a.md") == ["b.md: no such file", "a.md#three: no such heading", "`x/y.py`: no such file"]
