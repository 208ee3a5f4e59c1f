"""The embedded ProductQA generator: format, determinism, gold SQL, reuse across questions."""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path

import pytest

from agile.envs.answer_eval import is_correct
from agile.envs.catalog_generator import CATEGORY_KEYS, default_catalog_dir, generate_catalog
from agile.envs.product_db import ProductDB
from agile.envs.productqa import QUESTION_TYPES, REQUIRED_FIELDS, list_groups, load_group

from productqa_slice import SLICE as REAL_ROOT  # the real ProductQA slice bundled with the tests


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def catalog(tmp_path_factory) -> list[Path]:
    return generate_catalog(tmp_path_factory.mktemp("cat"), seed=0)


def test_same_seed_gives_byte_identical_files(tmp_path):
    generate_catalog(tmp_path / "a", seed=3)
    generate_catalog(tmp_path / "b", seed=3)
    a, b = files_of(tmp_path / "a"), files_of(tmp_path / "b")
    assert len(a) == 8 * 3 and a == b


def test_different_seeds_give_different_catalogs(tmp_path):
    generate_catalog(tmp_path / "a", seed=1)
    generate_catalog(tmp_path / "b", seed=2)
    a, b = files_of(tmp_path / "a"), files_of(tmp_path / "b")
    shared = set(a) & set(b)
    assert all(a[k] != b[k] for k in shared if k.endswith(("qa.jsonl", "metadata.json")))
    asins_a = {x for k in a if k.endswith("metadata.json") for x in json.loads(a[k])}
    asins_b = {x for k in b if k.endswith("metadata.json") for x in json.loads(b[k])}
    assert not asins_a & asins_b


def test_default_layout_and_speed(tmp_path):
    start = time.perf_counter()
    paths = generate_catalog(tmp_path, seed=0)
    assert time.perf_counter() - start < 1.0
    assert [p.parent.name for p in paths] == ["train"] * 6 + ["test"] * 2
    assert {p.name for p in paths} == {f"gen_{k}" for k in CATEGORY_KEYS}
    assert list_groups(tmp_path, "train") == sorted(paths[:6])
    assert list_groups(tmp_path, "test") == sorted(paths[6:])


def test_round_trip_through_the_loader(catalog):
    for path in catalog:
        group = load_group(path)
        assert len(group.questions) == 60 and len(group.metadata) == 20
        assert all(len(group.by_type(t)) > 0 for t in QUESTION_TYPES)
        for q in group.questions:
            assert q.asin in group.metadata and q.group == group.name
        rows = [json.loads(line) for line in (path / "qa.jsonl").read_text().splitlines()]
        assert all(list(r) == list(REQUIRED_FIELDS) for r in rows)  # the real files' field order
        assert [r["id"] for r in rows] == [q.id for q in group.questions]
        for spec in group.schema.values():
            assert spec["type"] in ("choice", "cloze")
        for product in group.metadata.values():
            assert set(product) == {"title"} | set(group.schema)
            assert all(v is None or isinstance(v, str) for v in product.values())


def test_gold_sql_executes_and_equals_short_answer(catalog):
    empty = total = 0
    for path in catalog:
        group = load_group(path)
        db = ProductDB(group)
        for q in group.by_type("search_qa"):
            assert db.query(q.gold_sql) == list(q.short_answer), (group.name, q.id, q.gold_sql)
            total += 1
            empty += not q.short_answer
    assert 0 < total and empty < total / 3  # a few searches have no match, as in the real data


def test_reasoning_knowledge_matches_the_product(catalog):
    for path in catalog:
        group = load_group(path)
        for q in group.by_type("reasoning_qa"):
            extra = q.extra_data
            assert set(extra) == {"knowledge", "feature_name", "feature_value", "type"}
            assert group.metadata[q.asin][extra["feature_name"]] == extra["feature_value"]
            assert q.short_answer in ("yes", "no") and extra["knowledge"]


def test_gold_and_long_answers_evaluate_as_correct(catalog):
    for path in catalog:
        group = load_group(path)
        titles = {a: p["title"] for a, p in group.metadata.items()}
        for q in group.questions:
            if q.type == "search_qa":
                assert is_correct(q, q.long_answer, titles) and is_correct(q, list(q.short_answer))
            else:
                assert is_correct(q, q.short_answer)
                if q.short_answer in ("yes", "no"):
                    assert not is_correct(q, "no" if q.short_answer == "yes" else "yes")


def test_questions_come_back_to_products_and_knowledge(catalog):
    for path in catalog:
        group = load_group(path)
        # the same product gets several fact questions; the same knowledge serves several
        per_asin = collections.Counter(q.asin for q in group.by_type("fact_qa"))
        assert per_asin.most_common(1)[0][1] >= 3, group.name
        knowledge = collections.Counter(q.extra_data["knowledge"] for q in group.by_type("reasoning_qa"))
        assert knowledge.most_common(1)[0][1] >= 2, group.name
        # a later question repeats an earlier (product, answer) fact in other or the same words
        seen, repeats = set(), 0
        for q in group.by_type("fact_qa"):
            key = (q.asin, q.long_answer)
            repeats += key in seen
            seen.add(key)
        assert repeats >= 1, group.name
        pairs = [(q.asin, q.question) for q in group.questions]
        assert all(a != b for a, b in zip(pairs, pairs[1:])), "identical consecutive questions"


def test_sizes_and_group_names_scale(tmp_path):
    paths = generate_catalog(tmp_path, seed=5, n_groups=10, products_per_group=4,
                             questions_per_group=3, test_groups=0)
    names = [p.name for p in paths]
    assert len(set(names)) == 10 and all(p.parent.name == "train" for p in paths)
    assert sum(n.endswith("_2") for n in names) == 2
    group = load_group(paths[-1])
    assert len(group.metadata) == 4 and sorted(q.type for q in group.questions) == sorted(QUESTION_TYPES)


def test_tiny_catalogs_over_many_seeds_stay_valid(tmp_path):
    for seed in range(12):
        for path in generate_catalog(tmp_path / str(seed), seed, products_per_group=2,
                                     questions_per_group=6):
            group = load_group(path)
            db = ProductDB(group)
            for q in group.by_type("search_qa"):
                assert db.query(q.gold_sql) == list(q.short_answer)


@pytest.mark.parametrize("kwargs", [dict(n_groups=0), dict(test_groups=9), dict(products_per_group=1),
                                    dict(questions_per_group=2)])
def test_bad_sizes_are_refused(tmp_path, kwargs):
    with pytest.raises(ValueError, match="need"):
        generate_catalog(tmp_path, seed=0, **kwargs)


def test_default_catalog_dir_writes_once(tmp_path, monkeypatch):
    monkeypatch.setenv("HELPGATE_CACHE", str(tmp_path))
    root = default_catalog_dir(seed=7)
    assert root == tmp_path / "catalog-7"
    assert len(list_groups(root, "train")) == 6 and len(list_groups(root, "test")) == 2
    qa = list_groups(root, "train")[0] / "qa.jsonl"
    stamp = qa.stat().st_mtime_ns
    assert default_catalog_dir(seed=7) == root and qa.stat().st_mtime_ns == stamp
    (root / ".complete").write_text("0")  # a catalog from another generator version is rewritten
    assert default_catalog_dir(seed=7) == root and (root / ".complete").read_text() != "0"
    assert [p.name for p in tmp_path.iterdir()] == ["catalog-7"]  # no temporary folder left


def test_generated_format_matches_the_real_files(catalog):
    real = list_groups(REAL_ROOT, "train")[0]
    real_rows = [json.loads(line) for line in (real / "qa.jsonl").read_text().splitlines()]
    ours = [json.loads(line) for line in (catalog[0] / "qa.jsonl").read_text().splitlines()]
    assert {frozenset(r) for r in real_rows} == {frozenset(r) for r in ours}
    real_reason = next(r for r in real_rows if r["type"] == "reasoning_qa")["extra_data"]
    our_reason = next(r for r in ours if r["type"] == "reasoning_qa")["extra_data"]
    assert set(our_reason) == set(real_reason)
    real_schema = json.loads((real / "schema.json").read_text())
    ours_schema = json.loads((catalog[0] / "schema.json").read_text())
    assert list(ours_schema)[:2] == list(real_schema)[:2] == ["price", "brand"]
