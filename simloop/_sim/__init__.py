"""The Sim's pieces: each concern of one run its own small object, assembled and delegated to by `simloop.sim.Sim`.

``assemble`` the scenario and the world's wiring; ``guard`` the runaway budgets; ``clients`` the SDK and httpx2
clients; ``turns`` the user turns; ``lives`` the drive's lives and restarts; ``runner`` the run on its worker thread;
``record`` its outcome; ``leftbehind`` what it leaves running; ``mcptools`` the tools over MCP; ``forwarded`` the
Sim's attributes its pieces keep.  None imports the Sim (`tests/test_layout.py`), save ``runner`` for its type.
"""
