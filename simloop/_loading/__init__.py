"""Reading a scenario file as data (docs/security.md, A scenario file is data).

Private to simloop; `simloop.scenario` (``load_scenario``) and `simloop.tools` use it.  The underscore marks
the package, so its modules carry none of their own.

* ``fileguard``: the caps, and what YAML may hold (only what JSON can carry), checked before anything is built;
* ``fastyaml``: libyaml's C parser composed into ruamel's tree, with the same checks;
* ``functions``: a tool's ``function:`` path, resolved only with an opt-in and only into the user's own code.
"""
