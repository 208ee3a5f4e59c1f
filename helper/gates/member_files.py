"""The member each cap of a helper folder plays (``members/``, written by ``helpgate distill``:
``helper.solve.select``), read back when the gate loads."""

from __future__ import annotations

from pathlib import Path

from tabular_rl import Discretizer, Solution
from trajectories.files import read_json_object

FOLDER = "members"
RECORD = "selection.json"


def load_members(helper_folder: str | Path) -> dict[int, tuple[Solution, Discretizer, str]]:
    """``{C: (table, discretizer, member name)}`` of a helper folder's ``members/`` (empty where it has none)."""
    folder = Path(helper_folder)
    path = folder / FOLDER / RECORD
    if not path.is_file():
        return {}
    record = read_json_object(path, "helpgate distill", "re-run `helpgate distill`")
    out = {}
    for c, entry in (record.get("chosen") or {}).items():
        try:
            discretizer = Discretizer.load(folder / entry["discretizer_file"])
            table = Solution.load(folder / entry["policy_file"], discretizer)
        except (KeyError, FileNotFoundError) as error:
            raise ValueError(f"{path}: cap {c}'s member files are missing ({error}); re-run `helpgate distill`.") \
                from error
        out[int(c)] = (table, discretizer, str(entry["member"].get("name")))
    return out
