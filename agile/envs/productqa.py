"""Load ProductQA in the AGILE format: one folder per product group.

Each group folder holds three files:

- ``qa.jsonl``: one question a line with the fields ``id, asin, question, short_answer,
  long_answer, type, extra_data``. ``type`` is ``fact_qa``, ``search_qa`` or ``reasoning_qa``.
  For ``search_qa`` the short answer is a list of ``{"asin", "title"}`` (possibly empty) and
  ``extra_data["sql"]`` is the gold query; for ``reasoning_qa`` ``extra_data`` holds the piece of
  knowledge with the feature it is about.
- ``schema.json``: the category's features, ``{"name": {"type": "choice", "choices": [...]}}`` or
  ``{"name": {"type": "cloze", "unit": ...}}``.
- ``metadata.json``: per asin a dict with ``title`` and feature values (strings, or null where
  a product lacks the feature).

A dataset root holds ``train/`` and ``test/`` folders of groups. The same loader reads the real
data (``../shared/productqa`` beside the repository, or ``$HELPGATE_PRODUCTQA``) and the catalogs
written by ``agile.envs.catalog_generator``.

Questions keep the file's order: an episode is the sequence of questions of one group, and
later questions reuse products and knowledge from earlier ones.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

QUESTION_TYPES = ("fact_qa", "search_qa", "reasoning_qa")
REQUIRED_FIELDS = ("id", "asin", "question", "short_answer", "long_answer", "type", "extra_data")
SPLITS = ("train", "test")
GROUP_FILES = ("qa.jsonl", "schema.json", "metadata.json")


@dataclass(frozen=True)
class Question:
    """One ProductQA question.

    ``short_answer`` is a string for fact and reasoning questions and a tuple of gold asins for
    search questions (empty when no product matches); ``answer_titles`` holds the titles that the
    file gives beside those asins (the file truncates long ones), in the same order.
    """

    id: str
    asin: str
    question: str
    short_answer: str | tuple[str, ...]
    long_answer: str
    type: str
    extra_data: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    group: str = ""
    answer_titles: tuple[str, ...] = ()

    @property
    def gold_sql(self) -> str | None:
        """The gold SQL of a search question (``extra_data["sql"]``), else None."""
        if self.type != "search_qa" or not self.extra_data:
            return None
        return self.extra_data.get("sql")


@dataclass
class ProductGroup:
    """A product group: its questions in file order, its feature schema and its products."""

    name: str
    questions: list[Question]
    schema: dict[str, dict[str, Any]]
    metadata: dict[str, dict[str, Any]]
    path: Path | None = None

    def by_type(self, qtype: str) -> list[Question]:
        """The questions of one type, in file order."""
        return [q for q in self.questions if q.type == qtype]


def default_productqa_root() -> Path:
    """Where the real ProductQA is expected: ``$HELPGATE_PRODUCTQA``, else ``../shared/productqa``
    beside the repository. The path may not exist; callers check."""
    env = os.environ.get("HELPGATE_PRODUCTQA")
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[3] / "shared" / "productqa"


def list_groups(root: str | Path, split: str = "train") -> list[Path]:
    """The group folders of ``root/split``, sorted by name (folders that hold a ``qa.jsonl``)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    split_dir = Path(root) / split
    if not split_dir.is_dir():
        raise FileNotFoundError(
            f"{split_dir}: no such folder. A ProductQA root holds train/ and test/ folders of "
            f"groups; point root (or $HELPGATE_PRODUCTQA) at it, or write a synthetic one with "
            f"agile.envs.catalog_generator.default_catalog_dir()."
        )
    return sorted(p for p in split_dir.iterdir() if p.is_dir() and (p / "qa.jsonl").is_file())


def held_out_train_split(root: str | Path, held_out: int) -> tuple[list[str], list[str]]:
    """The train split's group names as ``(trained on, held out)``: every fifth group by name, the first
    ``held_out`` of them, is kept out of training and evaluated beside the test groups."""
    names = [g.name for g in list_groups(root, "train")]
    held = names[4::5][:held_out]
    if len(held) < held_out:
        raise ValueError(f"held_out={held_out}: the train split has {len(names)} groups, so at most "
                         f"{len(names[4::5])} are held out (every fifth); lower it.")
    return [n for n in names if n not in held], held


def load_split(root: str | Path, split: str = "train") -> list[ProductGroup]:
    """Every group of ``root/split``, sorted by name."""
    return [load_group(p) for p in list_groups(root, split)]


def load_group(path: str | Path) -> ProductGroup:
    """Read one group folder; bad input raises an error naming the file, line and field."""
    path = Path(path)
    for name in GROUP_FILES:
        if not (path / name).is_file():
            raise FileNotFoundError(
                f"{path / name}: missing. A ProductQA group folder needs {', '.join(GROUP_FILES)}; "
                f"check the path, or regenerate the folder."
            )
    schema = _load_schema(path / "schema.json")
    metadata = _load_metadata(path / "metadata.json")
    questions = _load_questions(path / "qa.jsonl", path.name, metadata)
    return ProductGroup(path.name, questions, schema, metadata, path)


def _read_json(file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{file}: not valid JSON at line {e.lineno} column {e.colno} ({e.msg}); "
                         f"fix the file or regenerate it.") from e


def _load_schema(file: Path) -> dict[str, dict[str, Any]]:
    schema = _read_json(file)
    if not isinstance(schema, dict):
        raise ValueError(f"{file}: expected an object of features, got {type(schema).__name__}.")
    for name, spec in schema.items():
        if not isinstance(spec, dict) or spec.get("type") not in ("choice", "cloze"):
            raise ValueError(f"{file}: feature {name!r} needs \"type\": \"choice\" or \"cloze\", "
                             f"got {spec!r}; fix the schema entry.")
        if spec["type"] == "choice" and not isinstance(spec.get("choices"), list):
            raise ValueError(f"{file}: choice feature {name!r} needs a \"choices\" list; "
                             f"fix the schema entry.")
    return schema


def _load_metadata(file: Path) -> dict[str, dict[str, Any]]:
    metadata = _read_json(file)
    if not isinstance(metadata, dict) or not metadata:
        raise ValueError(f"{file}: expected a non-empty object of products keyed by asin.")
    for asin, product in metadata.items():
        if not isinstance(product, dict) or not isinstance(product.get("title"), str):
            raise ValueError(f"{file}: product {asin!r} needs an object with a string \"title\"; "
                             f"fix that entry.")
    return metadata


def _load_questions(file: Path, group: str, metadata: dict) -> list[Question]:
    questions: list[Question] = []
    with file.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue  # a trailing blank line is harmless
            where = f"{file}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e.msg} at column {e.colno}); "
                                 f"fix or remove the line.") from e
            questions.append(_parse_row(row, where, group, metadata))
    if not questions:
        raise ValueError(f"{file}: no questions; a group needs at least one line.")
    return questions


def _parse_row(row: Any, where: str, group: str, metadata: dict) -> Question:
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}.")
    missing = [k for k in REQUIRED_FIELDS if k not in row]
    if missing:
        raise ValueError(f"{where}: missing field {missing[0]!r} (every line needs "
                         f"{', '.join(REQUIRED_FIELDS)}); add it or regenerate the file.")
    qtype = row["type"]
    if qtype not in QUESTION_TYPES:
        raise ValueError(f"{where}: field 'type' is {qtype!r}; expected one of "
                         f"{', '.join(QUESTION_TYPES)}. Fix the line or drop it.")
    for key in ("id", "asin", "question", "long_answer"):
        if not isinstance(row[key], str):
            raise ValueError(f"{where}: field {key!r} must be a string, got {row[key]!r}.")
    if row["asin"] not in metadata:
        raise ValueError(f"{where}: field 'asin' is {row['asin']!r}, which metadata.json does "
                         f"not list; add the product there or fix the asin.")
    extra = row["extra_data"]
    if extra is not None and not isinstance(extra, dict):
        raise ValueError(f"{where}: field 'extra_data' must be an object or null, got {extra!r}.")
    titles: tuple[str, ...] = ()
    if qtype == "search_qa":
        gold = row["short_answer"]
        if not isinstance(gold, list) or not all(isinstance(x, dict) and "asin" in x for x in gold):
            raise ValueError(f"{where}: field 'short_answer' of a search_qa must be a list of "
                             f"{{\"asin\", \"title\"}} objects, got {gold!r}.")
        if not extra or not isinstance(extra.get("sql"), str):
            raise ValueError(f"{where}: field 'extra_data.sql' (the gold SQL) is missing from a "
                             f"search_qa; add it.")
        short: str | tuple[str, ...] = tuple(x["asin"] for x in gold)
        titles = tuple(x.get("title", "") for x in gold)
    else:
        short = row["short_answer"]
        if not isinstance(short, str):
            raise ValueError(f"{where}: field 'short_answer' of a {qtype} must be a string, "
                             f"got {short!r}.")
    return Question(row["id"], row["asin"], row["question"], short, row["long_answer"], qtype,
                    extra, group, titles)
