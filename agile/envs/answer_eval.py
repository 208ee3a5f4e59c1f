"""AGILE's short-answer evaluation for ProductQA.

Rules (``is_correct``):

- **fact_qa / reasoning_qa** (yes/no or a short value): exact match after normalisation. AGILE's
  own script compares ``' '.join(s.lower().split())``; on top of that we decode HTML entities,
  drop surrounding quotes and trailing punctuation (``"Yes."`` is ``yes``), and compare
  quantities by value: ``"18 inches"``, ``"18"``, ``"18.0 in"`` and ``"up to 18 inches"`` are
  equal, ``"1-year"`` equals ``"1 year"``, ``"32GB"`` equals ``"32 gb"``. A number matches when
  the values are equal and the units agree after singular/alias folding, or one side has no
  unit. Anything beyond a quantity must match word for word (``"2-year limited warranty"`` is
  not ``"2 years"``), and a yes/no answer is not inferred from a longer sentence.
- **search_qa**: the prediction is a list of product ids, or free text from which ids are parsed
  (``parse_product_ids``). As in AGILE's ``eval.py``, when the gold list is empty the answer is
  correct iff it names no product; otherwise it must name at least one product and only gold
  products. Gold lists hold every matching product while the agent usually names one (the gold
  SQL ends in ``LIMIT 1``), so a subset is enough.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence

from agile.envs.productqa import Question

_ASIN = re.compile(r"(?<![0-9A-Za-z])B0[0-9A-Z]{8}(?![0-9A-Za-z])", re.IGNORECASE)
_TOKEN10 = re.compile(r"(?<![0-9A-Za-z])[0-9A-Za-z]{10}(?![0-9A-Za-z])")
_QUANTITY = re.compile(
    r"(?:up to |about |approximately |approx\. |around )?"
    r"(\$)?\s*(\d[\d,]*(?:\.\d+)?|\.\d+)"          # value (commas allowed: 1,000)
    r"(?:\s*(?:-|to)\s*(\d[\d,]*(?:\.\d+)?))?"     # optional range end: 3-4, 2 to 3
    r"\s*-?\s*([a-z%\"][a-z%\" ]*)?"               # optional unit words
)
# Unit words folded to one spelling (after plural folding).
_UNIT_ALIASES = {
    "in": "inch", '"': "inch", "inche": "inch", "hr": "hour", "h": "hour", "min": "minute",
    "mins": "minute", "sec": "second", "s": "second", "yr": "year", "lb": "pound", "lbs": "pound",
    "oz": "ounce", "ft": "foot", "feet": "foot", "g": "gram", "gm": "gram", "kg": "kilogram",
    "l": "liter", "litre": "liter", "ml": "milliliter", "millilitre": "milliliter",
    "dollar": "dollar", "usd": "dollar", "$": "dollar", "w": "watt", "v": "volt", "f": "fahrenheit",
    "degrees fahrenheit": "fahrenheit", "degree fahrenheit": "fahrenheit", "yd": "yard",
    "m": "meter", "metre": "meter", "cm": "centimeter", "mm": "millimeter", "pc": "piece",
    "pcs": "piece", "mp": "megapixel", "db": "decibel",
}


def parse_product_ids(text: str, known: Iterable[str] | Mapping[str, str] | None = None) -> list[str]:
    """Product ids named in ``text``, in order of first mention, without repeats.

    Finds ASIN-like tokens (``B0`` + 8 letters/digits, any case, returned upper-case) and any
    10-character token that is one of the ``known`` ids. When ``known`` maps ids to titles and
    the text names no id, a product whose full title appears in it (case and HTML entities
    ignored; a title inside a longer mentioned title does not count) is named by that title.
    """
    text = text or ""
    found: list[tuple[int, str]] = [(m.start(), m.group(0).upper()) for m in _ASIN.finditer(text)]
    if known is not None:
        ids = {k.upper(): k for k in known}
        found += [(m.start(), ids[m.group(0).upper()]) for m in _TOKEN10.finditer(text)
                  if m.group(0).upper() in ids]
        # Titles are a fallback for text that names no id: real groups hold products with the
        # same title (grips: two "ACK, LLC Decal Grips ..."), which only the id tells apart.
        if isinstance(known, Mapping) and not found:
            found += _title_mentions(_fold(text), known)
    out: list[str] = []
    for _, asin in sorted(found, key=lambda x: x[0]):
        if asin not in out:
            out.append(asin)
    return out


def _title_mentions(folded: str, titles: Mapping[str, str]) -> list[tuple[int, str]]:
    spans = []
    for asin, title in titles.items():
        t = _fold(title or "")
        if len(t) < 8:  # a tiny title would match anything
            continue
        start = folded.find(t)
        while start >= 0:
            spans.append((start, start + len(t), asin))
            start = folded.find(t, start + 1)
    # A title inside a longer mentioned title is not a mention of its own: "Scale" products
    # often differ only by a suffix ("..., Red").
    return [(a, asin) for a, b, asin in spans
            if not any(c <= a and b <= d and (d - c) > (b - a) for c, d, _ in spans)]


def is_correct(question: Question, predicted: str | Sequence[str],
               products: Mapping[str, str] | None = None) -> bool:
    """Whether ``predicted`` answers ``question`` (rules in the module docstring).

    ``products`` (asin -> title, e.g. from the group's metadata) lets free-text search answers
    name products by title; the gold asins and titles of the question are always known.
    """
    if question.type == "search_qa":
        gold = set(question.short_answer)
        if isinstance(predicted, str):
            known = dict(zip(question.short_answer, question.answer_titles))
            if products:
                known.update(products)
            named = parse_product_ids(predicted, known)
        else:
            named = [str(p).strip() for p in predicted if str(p).strip()]
        if not gold:
            return not named
        return bool(named) and set(named) <= gold
    if not isinstance(predicted, str) or not isinstance(question.short_answer, str):
        return False
    return answers_match(question.short_answer, predicted)


def answers_match(gold: str, predicted: str) -> bool:
    """Normalised exact match of two short answers, quantities compared by value and unit."""
    g, p = normalize_answer(gold), normalize_answer(predicted)
    if g == p:
        return True
    gq, pq = _quantity(g), _quantity(p)
    if gq is None or pq is None:
        return False
    (g_val, g_unit), (p_val, p_unit) = gq, pq
    return g_val == p_val and (g_unit == p_unit or not g_unit or not p_unit)


def normalize_answer(text: str) -> str:
    """Lower case, HTML entities decoded, whitespace collapsed, quotes and end punctuation dropped."""
    s = " ".join(html.unescape(str(text)).lower().split())
    s = s.strip("`'\u2018\u2019\u201c\u201d ")
    s = re.sub(r"[.!?,;:]+$", "", s).strip()
    if len(s) >= 2 and s[0] == s[-1] == '"':
        s = s[1:-1].strip()
    return s


def _quantity(s: str) -> tuple[tuple[float, ...], str] | None:
    m = _QUANTITY.fullmatch(s)
    if not m:
        return None
    dollar, first, last, unit = m.groups()
    values = tuple(float(v.replace(",", "")) for v in (first, last) if v)
    words = " ".join(_unit_word(w) for w in (unit or "").split())
    words = _UNIT_ALIASES.get(words, words)
    if " " in words:  # a quantity has one unit word; "2-year limited warranty" is not one
        return None
    if dollar:
        if words not in ("", "dollar"):
            return None
        words = "dollar"
    return values, words


def _unit_word(word: str) -> str:
    w = word.strip()
    if w in _UNIT_ALIASES:
        return _UNIT_ALIASES[w]
    if w.endswith(("ches", "shes", "xes")):
        w = w[:-2]
    elif w.endswith("s") and len(w) > 2 and not w.endswith("ss"):
        w = w[:-1]
    return _UNIT_ALIASES.get(w, w)


def _fold(text: str) -> str:
    return " ".join(html.unescape(text).lower().split())
