"""Reference agent loops for simloop: correct ones and ones with the classic bugs.

Each module is an agent loop written the way people write them with the
official ``anthropic`` SDK, plus the few-line ``drive(sim)`` adapter that runs
it inside a `simloop.Sim`.  The ``correct_*`` loops pass every invariant on
every curated scenario; each other module carries exactly one classic defect,
named in its docstring together with the invariant that catches it.
`examples.catalogue` maps every defect to the scenario that shows it.

The wheel ships this folder as ``simloop.examples`` (see docs/design.md, Packaging), so modules here
import each other relatively (``from ._common import ...``): they then work under both names.
"""
