"""Whether the process's heap is a search's to freeze: nothing is frozen but what Python keeps frozen of its own.

``gc.freeze``/``gc.unfreeze`` act on the whole permanent generation at once, so a search (and `verify`'s fork of its
workers) freezes the heap only when the process froze nothing itself, and its ``gc.unfreeze`` then hands back only
what it froze (docs/design.md, Campaign engine).
"""

from __future__ import annotations

import gc
import sys

#: What CPython itself keeps in the permanent generation.  3.12 makes the ``__bases__`` and ``__mro__`` tuples of its
#: built-in types immortal and keeps them there (375 objects on 3.12.1): from startup, and again after each full
#: collection, which moves immortal objects back there (so a search's ``gc.unfreeze`` hands them back only until
#: then); 3.11 and 3.13 keep nothing there.  Read when simloop is first imported, on 3.12 only: elsewhere anything
#: frozen is the process's own (on 3.12 a heap frozen before simloop's import is taken for Python's own).
PYTHONS_OWN = gc.get_freeze_count() if sys.version_info[:2] == (3, 12) else 0


def ours_to_freeze() -> bool:
    """Whether the permanent generation holds nothing but Python's own (`PYTHONS_OWN`): the process froze no heap."""
    return gc.get_freeze_count() <= PYTHONS_OWN
