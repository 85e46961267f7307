"""simloop's own suite runs identically every time: derandomized, no Hypothesis example database.

(A database replays earlier failures first, which is what users want and what the
plugin keeps for them; for this suite it would make a run depend on the last one.)
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("simloop-suite", database=None, derandomize=True)
settings.load_profile("simloop-suite")
