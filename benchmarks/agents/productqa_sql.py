"""Per-group report: does ProductQA's gold SQL run on the product table, and return the gold?

    python benchmarks/agents/productqa_sql.py [--root ../shared/productqa]

For every search question of every group (train and test) it runs ``extra_data["sql"]`` on
``agile.envs.product_db.ProductDB`` and prints, per group:

- ``exec``: share of gold SQL that executes;
- ``gold``: share whose result is a subset of the gold asins, non-empty exactly when the gold is
  (the rule AGILE scores a search answer with; the gold SQL ends in ``LIMIT 1`` while the short
  answer lists every matching product);
- ``nolimit=``: share whose result equals the gold set once the trailing ``LIMIT k`` is removed
  (lower by design: with ``ORDER BY x LIMIT 1`` removed the query returns every product that
  passes the filter, not only those tied at the extreme);
- ``answer=``: share where the dataset's own full-set query (``extra_data["answer"]``, written
  with ``x = (SELECT MIN(x) ...)``) returns exactly the gold set.

The last lines list the distinct SQLite errors with a count and one example each.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agile.envs.product_db import ProductDB, SQLError  # noqa: E402
from agile.envs.productqa import default_productqa_root, list_groups, load_group  # noqa: E402

_LIMIT = re.compile(r"\s+LIMIT\s+\d+\s*;?\s*$", re.IGNORECASE)


def group_report(path: Path, errors: collections.Counter, examples: dict) -> dict:
    """Counts for one group; SQLite errors are added to ``errors`` keyed by (group, message)."""
    group = load_group(path)
    db = ProductDB(group)
    c = collections.Counter()
    for q in group.by_type("search_qa"):
        gold = set(q.short_answer)
        c["n"] += 1
        answer = (q.extra_data or {}).get("answer")
        if answer:
            try:
                c["answer"] += set(db.query(answer)) == gold
            except SQLError:
                pass
        try:
            result = db.query(q.gold_sql)
        except SQLError as e:
            errors[(group.name, e.message)] += 1
            examples.setdefault((group.name, e.message), q.id)
            continue
        c["exec"] += 1
        c["gold"] += set(result) <= gold and bool(result) == bool(gold)
        c["nolimit"] += set(db.query(_LIMIT.sub("", q.gold_sql.strip()))) == gold
    return {"group": group.name, **c}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=default_productqa_root(),
                        help="ProductQA root with train/ and test/ (default: $HELPGATE_PRODUCTQA "
                             "or ../shared/productqa)")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        print(f"{args.root}: not found; pass --root or set HELPGATE_PRODUCTQA.", file=sys.stderr)
        return 2
    start = time.perf_counter()
    errors: collections.Counter = collections.Counter()
    examples: dict = {}
    rows = []
    for split in ("train", "test"):
        for path in list_groups(args.root, split):
            rows.append({"split": split, **group_report(path, errors, examples)})
    head = f"{'split':5} {'group':32} {'search':>6} {'exec':>6} {'gold':>6} {'nolimit=':>8} {'answer=':>8}"
    print(head)
    print("-" * len(head))
    total = collections.Counter()
    for r in rows:
        n = r.get("n", 0)
        total.update({k: v for k, v in r.items() if isinstance(v, int)})
        print(_line(r["split"], r["group"], r, n))
    print("-" * len(head))
    print(_line("", "all", total, total["n"]))
    for (group, message), count in sorted(errors.items()):
        print(f"error in {group}: {count}x {message!r} (e.g. question {examples[(group, message)]})")
    print(f"{len(rows)} groups, {total['n']} search questions in {time.perf_counter() - start:.1f} s")
    return 0


def _line(split: str, group: str, c, n: int) -> str:
    share = (lambda k: f"{c.get(k, 0) / n:.3f}" if n else "-")
    return (f"{split:5} {group:32} {n:6d} {share('exec'):>6} {share('gold'):>6} "
            f"{share('nolimit'):>8} {share('answer'):>8}")


if __name__ == "__main__":
    raise SystemExit(main())
