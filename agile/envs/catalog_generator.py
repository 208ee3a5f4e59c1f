"""Write a synthetic ProductQA catalog from a seed, in the same format as the real data.

    from agile.envs.catalog_generator import default_catalog_dir
    root = default_catalog_dir(seed=0)        # <cache>/catalog-0/{train,test}/gen_<category>/

Each group folder gets ``qa.jsonl``, ``schema.json`` and ``metadata.json`` with the real files'
fields, so ``agile.envs.productqa.load_group`` reads it unchanged. A group is one product category
(headphones, kettles, backpacks, ...) with products that carry:

- searchable features (``brand``, snake_case choice features, numeric cloze features, ``price``)
  that ``search_qa`` questions filter on. Their gold SQL (``extra_data["sql"]``) returns exactly
  the gold products: it is run on ``agile.envs.product_db.ProductDB`` to write ``short_answer``;
- descriptive features (Title Case, as in the real schemas) that ``reasoning_qa`` questions need
  together with a piece of knowledge (``extra_data = {knowledge, feature_name, feature_value,
  type}`` as in the real rows): "Can I leave this kettle unattended?" depends on its
  ``Auto Shut-off``;
- hidden facts that only question history reveals (``fact_qa`` as from reviews: "Is the lid easy
  to open?"), asked again later in other words, so memory of past answers pays off. Other
  ``fact_qa`` ask yes/no or a value about a listed feature.

Products are drawn with skewed weights, so the same products, features and pieces of knowledge
come back within a session. Everything is drawn from ``random.Random`` seeded with a string, and
files are written as bytes: the same seed gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from agile.envs import catalog_templates as _templates
from agile.envs.catalog_templates import CATEGORIES, CATEGORY_KEYS, Category, Choice, Cloze  # noqa: F401 (re-exported)
from agile.envs.product_db import ProductDB
from agile.envs.productqa import ProductGroup

GENERATOR_VERSION = "1"
# A cached catalog records the version and a digest of this file: any edit to the generator
# makes default_catalog_dir write the catalog again rather than serve a stale one.
_SOURCE_DIGEST = hashlib.sha256(
    Path(__file__).read_bytes() + Path(_templates.__file__).read_bytes()
).hexdigest()[:16]
_CACHE_STAMP = f"{GENERATOR_VERSION}:{_SOURCE_DIGEST}"
_ASIN_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


# -- catalog ------------------------------------------------------------------------------------

def generate_catalog(out_dir: str | Path, seed: int = 0, n_groups: int = 8,
                     products_per_group: int = 20, questions_per_group: int = 60,
                     test_groups: int = 2) -> list[Path]:
    """Write ``n_groups`` groups under ``out_dir/train`` and ``out_dir/test`` (the last
    ``test_groups`` go to test); return the group folders in order.

    Groups are named ``gen_<category>`` (``gen_<category>_<k>`` once every category is used).
    """
    if n_groups < 1 or not 0 <= test_groups <= n_groups:
        raise ValueError(f"need n_groups >= 1 and 0 <= test_groups <= n_groups, got "
                         f"n_groups={n_groups}, test_groups={test_groups}")
    if products_per_group < 2 or questions_per_group < 3:
        raise ValueError(f"need products_per_group >= 2 and questions_per_group >= 3 (one "
                         f"question of each type), got {products_per_group} and "
                         f"{questions_per_group}")
    order = list(CATEGORIES)
    random.Random(f"helpgate-catalog/{seed}/order").shuffle(order)
    used_asins: set[str] = set()
    paths = []
    for i in range(n_groups):
        cat = order[i % len(order)]
        name = f"gen_{cat.key}" + (f"_{i // len(order) + 1}" if i >= len(order) else "")
        split = "test" if i >= n_groups - test_groups else "train"
        rng = random.Random(f"helpgate-catalog/{seed}/{name}")
        schema, metadata = _products(cat, rng, products_per_group, used_asins)
        rows = _questions(cat, name, schema, metadata, rng, questions_per_group)
        path = Path(out_dir) / split / name
        _write_group(path, schema, metadata, rows)
        paths.append(path)
    return paths


def default_catalog_dir(seed: int = 0) -> Path:
    """The default catalog (8 groups: 6 train, 2 test) under ``$HELPGATE_CACHE`` or
    ``~/.cache/helpgate``, as ``catalog-<seed>``; written once, then reused."""
    base = Path(os.environ.get("HELPGATE_CACHE") or Path.home() / ".cache" / "helpgate")
    root = base / f"catalog-{seed}"
    marker = root / ".complete"
    if marker.is_file() and marker.read_text() == _CACHE_STAMP:
        return root
    base.mkdir(parents=True, exist_ok=True)
    # Write beside the target and rename, so a reader never sees a half-written catalog and two
    # processes racing each produce a whole one.
    tmp = Path(tempfile.mkdtemp(prefix=f".catalog-{seed}-", dir=base))
    try:
        generate_catalog(tmp, seed)
        (tmp / ".complete").write_text(_CACHE_STAMP)
        if marker.is_file() and marker.read_text() == _CACHE_STAMP:
            return root  # another process finished first
        if root.exists():
            shutil.rmtree(root, ignore_errors=True)  # stale version
        try:
            os.rename(tmp, root)
        except OSError:
            if not (marker.is_file() and marker.read_text() == _CACHE_STAMP):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _products(cat: Category, rng: random.Random, n: int, used: set[str]):
    schema: dict = {"price": {"type": "cloze", "unit": "dollar"},
                    "brand": {"type": "choice", "choices": list(cat.brands)}}
    for f in cat.features:
        if isinstance(f, Choice):
            schema[f.name] = {"type": "choice", "choices": list(f.values)}
        else:
            schema[f.name] = {"type": "cloze", "format": f.fmt,
                              "example": _render(f.fmt, f.values[0]), "unit": f.unit}
    # A few products lack one descriptive feature, as real metadata has nulls; the first keeps
    # all, so every reasoning rule has a product to be asked about.
    optional = [f.name for f in cat.features if isinstance(f, Choice) and f.say is None]
    metadata: dict = {}
    for _ in range(n):
        asin = _asin(rng, used)
        product: dict = {"price": None, "brand": rng.choice(cat.brands)}
        for f in cat.features:
            value = rng.choice(f.values)
            product[f.name] = value if isinstance(f, Choice) else _num(value)
        if optional and metadata and rng.random() < 0.1:  # the first product stays complete
            product[rng.choice(optional)] = None
        lo, hi = cat.price
        product["price"] = f"{rng.uniform(lo, hi):.0f}.{rng.choice(['99', '95', '49', '00'])}"
        fields = {k: (v if v is not None else "") for k, v in product.items()}
        fields["model"] = rng.choice(cat.models)
        title = cat.title.format(**{k.replace(" ", "_"): v for k, v in fields.items()})
        metadata[asin] = {"title": title, **product}
    return schema, metadata


def _questions(cat: Category, name: str, schema: dict, metadata: dict, rng: random.Random,
               n: int) -> list[dict]:
    asins = list(metadata)
    rng.shuffle(asins)
    weights = [1.0 / (i + 1) ** 0.8 for i in range(len(asins))]  # a few products come back often
    n_search, n_reason = max(1, n // 4), max(1, n // 4)
    types = ["search_qa"] * n_search + ["reasoning_qa"] * n_reason
    types += ["fact_qa"] * (n - len(types))
    rng.shuffle(types)
    hidden = {(a, i): rng.random() < 0.5 for a in asins for i in range(len(cat.hidden))}
    db = ProductDB(ProductGroup(name, [], schema, metadata))
    rows, counts, asked = [], {"fact_qa": 0, "search_qa": 0, "reasoning_qa": 0}, []
    for qtype in types:
        for _ in range(4):  # the same question about the same product twice in a row is dull
            asin = rng.choices(asins, weights)[0]
            if qtype == "search_qa":
                row = _search(cat, name, metadata, db, rng)
            elif qtype == "reasoning_qa":
                row = _reasoning(cat, metadata, rng, asins, weights)
            else:
                row = _fact(cat, metadata, rng, hidden, asin, asked)
            asin = row.pop("asin", asin)
            if not rows or (rows[-1]["asin"], rows[-1]["question"]) != (asin, row["question"]):
                break
        rows.append({"id": f"{qtype}_{counts[qtype]}", "asin": asin, **row, "type": qtype})
        counts[qtype] += 1
    db.close()
    order = ("id", "asin", "question", "short_answer", "long_answer", "type", "extra_data")
    return [{k: r[k] for k in order} for r in rows]


def _fact(cat: Category, metadata: dict, rng: random.Random, hidden: dict, asin: str,
          asked: list) -> dict:
    if rng.random() < 0.5:  # a fact only past answers reveal
        if asked and rng.random() < 0.5:  # ask again what was asked before: memory pays off
            asin, i = rng.choice(asked)
        else:
            i = rng.randrange(len(cat.hidden))
            asked.append((asin, i))
        h = cat.hidden[i]
        yes = hidden[(asin, i)]
        return {"asin": asin, "question": rng.choice(h.questions),
                "short_answer": "yes" if yes else "no", "long_answer": h.yes if yes else h.no,
                "extra_data": None}
    product = metadata[asin]
    feats = [f for f in cat.features if product.get(f.name) is not None]
    f = rng.choice(feats)
    actual = product[f.name]
    label = f.name.replace("_", " ").lower()
    if isinstance(f, Cloze):
        value = _render(f.fmt, actual)
        return {"question": f"What is the {f.label} of {cat.this}?", "short_answer": value,
                "long_answer": f"The {f.label} of {cat.this} is {value}.", "extra_data": None}
    v = actual if rng.random() < 0.5 else rng.choice(f.values)
    question = f.ask.format(v=v, label=label, noun=cat.noun)
    if set(f.values) == {"yes", "no"}:  # the question asks whether the feature is there
        yes = actual == "yes"
        long = f"{'Yes' if yes else 'No'}. The listing for {cat.this} says {f.name}: {actual}."
    else:
        yes = v == actual
        long = (f"Yes. The {label} of {cat.this} is {actual}." if yes else
                f"No. The {label} of {cat.this} is {actual}, not {v}.")
    return {"question": question, "short_answer": "yes" if yes else "no", "long_answer": long,
            "extra_data": None}


def _reasoning(cat: Category, metadata: dict, rng: random.Random, asins, weights) -> dict:
    rule = rng.choice(cat.rules)
    for _ in range(50):  # a product with a value for the rule's feature
        asin = rng.choices(asins, weights)[0]
        value = metadata[asin].get(rule.feature)
        if value in rule.by_value:
            break
    else:
        asin = next(a for a in asins if metadata[a].get(rule.feature) in rule.by_value)
        value = metadata[asin][rule.feature]
    short, knowledge, long = rule.by_value[value]
    return {"asin": asin, "question": rng.choice(rule.questions), "short_answer": short,
            "long_answer": long,
            "extra_data": {"knowledge": knowledge, "feature_name": rule.feature,
                           "feature_value": value, "type": rule.kind}}


def _search(cat: Category, name: str, metadata: dict, db: ProductDB, rng: random.Random) -> dict:
    searchable = [f for f in cat.features if isinstance(f, Cloze) or f.say is not None]
    searchable.append(Choice("brand", cat.brands, "from {v}"))
    searchable.append(Cloze("price", "dollar", "_ dollar(s)", (), "price"))
    for attempt in range(6):  # redraw most empty results: real data has a few, not many
        preds = rng.sample(searchable, rng.choice((1, 1, 2, 2, 2)))
        conds, phrases = zip(*(_predicate(f, metadata, rng) for f in preds))
        where = " AND ".join(conds)
        numeric = [f for f in searchable if isinstance(f, Cloze)]
        best = rng.choice(numeric) if rng.random() < 0.3 else None
        sql = f"SELECT product_id FROM `{name}` WHERE {where}"
        asks = ["I'm looking for {one} {c}.", "Do you have {one} {c}?",
                "Can you find me {one} {c}?"]
        if best is None:  # a superlative ends the question itself
            asks.append("I need {one} {c}. What do you recommend?")
        ask = rng.choice(asks)
        question = ask.format(one=cat.one, c=" and ".join(phrases))
        if best is not None:
            agg = "MIN" if best.name in ("price", "weight") or rng.random() < 0.3 else "MAX"
            sql += (f" AND {_col(best.name)} = (SELECT {agg}({_col(best.name)}) FROM `{name}` "
                    f"WHERE {where})")
            question += (" Which is the cheapest?" if best.name == "price" and agg == "MIN" else
                         f" Which one has the {'lowest' if agg == 'MIN' else 'highest'} "
                         f"{best.label}?")
        sql += ";"
        gold = db.query(sql)
        if gold or attempt == 5 or rng.random() < 0.3:
            break
    if gold:
        first = gold[0]
        long = (f"I found a product that matches your criteria.\n`{metadata[first]['title']}` "
                f"with asin: {first}")
    else:
        long = "Sorry, we do not have any products that meet your requirements"
    return {"question": question,
            "short_answer": [{"asin": a, "title": metadata[a]["title"]} for a in gold],
            "long_answer": long, "extra_data": {"sql": sql, "answer": sql}}


def _predicate(f, metadata: dict, rng: random.Random) -> tuple[str, str]:
    present = sorted({p[f.name] for p in metadata.values() if p.get(f.name) is not None}, key=str)
    if isinstance(f, Choice):
        kind = rng.choice(("eq", "eq", "in", "not"))
        if kind == "in" and len(f.values) > 2:
            vs = rng.sample(list(f.values), 2)
            cond = f"{_col(f.name)} IN ({', '.join(_lit(v) for v in vs)})"
            return cond, f.say.format(v=" or ".join(vs))
        v = rng.choice(present) if rng.random() < 0.8 else rng.choice(f.values)
        if kind == "not":
            phrase = f.negate.format(v=v) if f.negate else "not " + f.say.format(v=v)
            return f"NOT {_col(f.name)} = {_lit(v)}", phrase
        return f"{_col(f.name)} = {_lit(v)}", f.say.format(v=v)
    x = float(rng.choice(present))
    if f.name == "price":
        x = float(max(5, round(x / 5) * 5))
    op = rng.choice(("<", "<=", ">", ">="))
    words = {"<": "under", "<=": "at most", ">": "over", ">=": "at least"}[op]
    shown = _num(x)
    if f.name == "price":
        phrase = f"priced {words} ${shown}"
    else:
        phrase = f"with {f.label} {words} {_render(f.fmt, shown).replace('up to ', '')}"
    return f"{_col(f.name)} {op} {shown}", phrase


def _write_group(path: Path, schema: dict, metadata: dict, rows: list[dict]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "schema.json").write_bytes(json.dumps(schema, indent=4).encode("utf-8"))
    (path / "metadata.json").write_bytes(json.dumps(metadata, indent=4).encode("utf-8"))
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    (path / "qa.jsonl").write_bytes(lines.encode("utf-8"))


def _asin(rng: random.Random, used: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choice(_ASIN_CHARS) for _ in range(8))
        if asin not in used:
            used.add(asin)
            return asin


def _num(x: float) -> str:
    return f"{float(x):g}"


def _render(fmt: str, value) -> str:
    v = _num(float(value))
    return fmt.replace("_", v).replace("(s)", "" if float(value) == 1 else "s")


def _col(name: str) -> str:
    return name if name.replace("_", "").isalnum() else f"`{name}`"


def _lit(value: str) -> str:
    # Single quotes: in SQLite a double-quoted word that names a column is read as the column.
    return "'" + value.replace("'", "''") + "'"
