"""The simulated API's server: a request parsed, planned against the run's model and tools, and delivered.

`server` (`SimServer`: reads and routes the three wires' requests and records them in the transcript;
each concern is its own module beside it: `bodies`, `checks`, `fastlane`, `threads`, `answer`, `failures`,
`openai_wires`, `planned`), `transport` (the in-process httpx2 transports the SDK clients get) and `loopback` (the same
world on a real loopback socket, for ``simloop serve`` and ``--command``).  It stands on the protocol
(`simloop.protocol`) and on the run (`simloop.models`, `simloop.tools`, `simloop.transcript`); the protocol
never imports it, and it never imports `simloop.sim` (`tests/test_layout.py`).
"""
