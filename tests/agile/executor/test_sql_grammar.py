"""The constrained policy's query grammar: every query it allows runs on the table it was built from."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agile.envs.catalog_generator import default_catalog_dir
from agile.envs.product_db import ProductDB
from agile.envs.productqa import load_split
from agile.executor.sql_grammar import SQLGrammar, column, literal

GROUPS = load_split(default_catalog_dir(seed=0), "train")
DBS = [ProductDB(group) for group in GROUPS[:3]]


def test_quoting_of_names_and_values():
    assert column("brand") == "brand" and column("Machine Washable") == '"Machine Washable"'
    assert column('a"b') == '"a""b"'
    assert literal("it's") == "'it''s'"


def test_grammar_offers_only_values_that_occur():
    db = DBS[0]
    grammar = SQLGrammar.of(db)
    for name, values in grammar.text_values:
        col = column(name)
        for value in values:
            assert db.query(f"SELECT product_id FROM `{db.table}` WHERE {col} = {literal(value)};"), (name, value)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_every_query_the_grammar_allows_runs(data):
    db = data.draw(st.sampled_from(DBS))
    grammar = SQLGrammar.of(db)
    text, used = grammar.prefix(), set()
    for k in range(data.draw(st.integers(1, 3))):
        columns = grammar.columns(used)
        if not columns:
            break
        if k:
            text += " AND"
        unit = data.draw(st.sampled_from(columns))
        used.add(grammar.name_of(unit))
        text += unit + data.draw(st.sampled_from(grammar.values(grammar.name_of(unit))))
    text += data.draw(st.sampled_from(grammar.endings()))
    rows = db.query(text)  # raises SQLError if the grammar allowed a query that does not run
    assert len(rows) <= (1 if "LIMIT 1" in text else len(db.group.metadata))
