"""Write the ProductQA slice the tests run on, from the full data.

    python tests/data/trim_productqa.py --source ../shared/productqa --out tests/data/productqa

Each kept group keeps its ``schema.json`` and ``metadata.json`` unchanged (all of the group's
products, so every gold SQL answer stays what the full table gives) and the first ``--questions``
lines of its ``qa.jsonl`` in file order: a prefix, so a later question still finds the products and
knowledge of the earlier ones. The groups are the ones the tests name. The LICENSE is copied and a
README says where the slice came from.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

GROUPS = {
    "train": ["blades", "camera_lenses", "litter"],
    "test": ["all_pans", "camera_cases", "leggings", "motherboards"],
}
QUESTIONS = 30

README = """# ProductQA slice (for the tests)

A trimmed copy of ProductQA, from the AGILE paper (Feng et al., 2024, "AGILE: A Novel
Reinforcement Learning Framework of LLM Agents"), released under Apache-2.0 (see LICENSE).

Trimmed by `tests/data/trim_productqa.py` from the full data (20 train and 4 test groups) to the groups

{groups}

In each group, `schema.json` and `metadata.json` are unchanged (all products) and `qa.jsonl` keeps
its first {questions} lines (in file order). Nothing else was changed.

The tests read this folder. Benchmarks read the full data (`../shared/productqa` beside the
repository, or `$HELPGATE_PRODUCTQA`).
"""


def trim(source: Path, out: Path, questions: int = QUESTIONS) -> None:
    if out.exists():
        shutil.rmtree(out)
    for split, names in GROUPS.items():
        for name in names:
            src, dst = source / split / name, out / split / name
            dst.mkdir(parents=True)
            for file in ("schema.json", "metadata.json"):
                shutil.copyfile(src / file, dst / file)
            with (src / "qa.jsonl").open(encoding="utf-8") as f:
                lines = [next(f) for _ in range(questions)]
            (dst / "qa.jsonl").write_text("".join(lines), encoding="utf-8")
    shutil.copyfile(source / "LICENSE", out / "LICENSE")
    listed = "\n".join(f"- {split}: {', '.join(names)}" for split, names in GROUPS.items())
    (out / "README.md").write_text(README.format(groups=listed, questions=questions), encoding="utf-8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=Path("../shared/productqa"))
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "productqa")
    parser.add_argument("--questions", type=int, default=QUESTIONS)
    args = parser.parse_args()
    trim(args.source, args.out, args.questions)
