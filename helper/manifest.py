"""The manifest of a trajectory folder (what is finished, and the config that made it).

The one implementation is ``agile.dataset.Manifest`` (shared with ``prm score``'s resume); this
module keeps the import path collection has always used.
"""

from agile.dataset import MANIFEST, VERSION, ConfigMismatch, Manifest

__all__ = ["MANIFEST", "VERSION", "ConfigMismatch", "Manifest"]
