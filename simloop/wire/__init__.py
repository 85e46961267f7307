"""The simulated API's server: a request parsed, planned against the run's model and tools, and delivered.

`server` (`SimServer`: the routes of the three wires, the threads of ``previous_response_id``, the
transcript), `transport` (the in-process httpx2 transports the SDK clients get) and `loopback` (the same
world on a real loopback socket, for ``simloop serve`` and ``--command``).  It stands on the protocol
(`simloop.protocol`) and on the run (`simloop.models`, `simloop.tools`, `simloop.transcript`); the protocol
never imports it, and it never imports `simloop.sim` (`tests/test_layout.py`).
"""
