"""The manifest of a trajectory folder: the config that made it and the shards that are complete.

``manifest.json`` is rewritten atomically after each shard, so after a crash it lists exactly
the shards that were fully written. A rerun with the same config skips them; a rerun with a
different config is refused, naming the first field that differs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helper.schema import write_json_atomic

MANIFEST = "manifest.json"
VERSION = 1


class ConfigMismatch(ValueError):
    """The folder was written with another config; the message names the field."""


@dataclass
class Manifest:
    path: Path
    config: dict[str, Any]
    shards: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Completed shards: file name -> {"first": episode index, "count": episodes, "rows": rows}."""
    complete: bool = False

    @classmethod
    def open(cls, out: str | Path, config: dict[str, Any], ignore: tuple[str, ...] = ()) -> Manifest:
        """Load ``out/manifest.json`` and check it was written with ``config`` (fields in
        ``ignore`` may differ), or start a new one when ``out`` is empty or missing."""
        out = Path(out)
        path = out / MANIFEST
        if path.exists():
            try:
                data = json.loads(path.read_text())
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{path}: not valid JSON ({error}); delete the folder or choose another --out."
                ) from error
            stored = data.get("config", {})
            differing = [key for key in sorted(set(stored) | set(config))
                         if key not in ignore and stored.get(key) != config.get(key)]
            if differing:
                was = ", ".join(f"{key}={stored.get(key)!r}" for key in differing)
                now = ", ".join(f"{key}={config.get(key)!r}" for key in differing)
                raise ConfigMismatch(
                    f"{out} was collected with {was}, but this run has {now}. Rerun with the same "
                    f"arguments to resume, or choose another --out."
                )
            return cls(path, stored, data.get("shards", {}), bool(data.get("complete", False)))
        if out.exists() and any(p for p in out.iterdir() if not p.name.startswith(".")):
            raise FileExistsError(
                f"{out} already holds files but no {MANIFEST}: it was not written by this collection. "
                "Choose an empty or new --out folder."
            )
        manifest = cls(path, dict(config))
        manifest.save()
        return manifest

    def save(self) -> None:
        write_json_atomic(
            {"version": VERSION, "config": self.config, "shards": self.shards, "complete": self.complete},
            self.path,
        )

    def mark_done(self, name: str, first: int, count: int, rows: int) -> None:
        self.shards[name] = {"first": first, "count": count, "rows": rows}
        self.save()

    def is_done(self, name: str) -> bool:
        return name in self.shards and (self.path.parent / name).exists()
