"""Where the tests find ProductQA: the trimmed slice bundled under ``tests/data/productqa``.

The tests always read the slice, never ``../shared/productqa``: a fresh clone runs every test, and
the exact values the tests assert are those of the slice (``tests/data/trim_productqa.py`` writes it).
"""

from pathlib import Path

SLICE = Path(__file__).resolve().parent / "data" / "productqa"
"""A ProductQA root (train/ and test/ folders of groups, in the AGILE format)."""
