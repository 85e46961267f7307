"""The run's machinery: what runs the loop under test, what it runs on, and what keeps it in bounds.

Private to simloop: nothing here is public API (a loop meets the clock as ``sim.clock``).
The underscore marks the package, so its modules carry none of their own.  Below the simulator: nothing
here imports what stands on it (the Sim, the simulated API, the world's models and tools, verify, the
command line; `tests/test_layout.py`), and what it needs of them is passed in.

* what the loop runs on: ``clock`` (the `VirtualClock`), ``eventloop`` (the virtual-time event loop the clock
  makes), ``jobs`` (that loop's executor jobs), ``sockets`` (its connections to simloop's own servers),
  ``patches`` (what a run patches, installed and put back), ``datetimes`` (the ``datetime`` substitutes),
  ``aliases`` (the loop's ``from time import monotonic`` names the clock rebinds), ``realtime`` (the real clocks, `RealTimeThread`),
  ``registry`` (which thread runs on which clock, and what was replaced), ``threadtime`` (each thread's own time);
* what runs it: ``worker`` (the thread a run can abandon), ``stack`` (stack space of its own),
  ``prepare`` (simloop's first-time work, done before the loop's time is counted), ``heap`` (whether a search
  may freeze the process's heap);
* what keeps it in bounds: ``halt`` (`LoopHalted`), ``watchdog`` (a loop that spins in real time),
  ``netguard`` (the real network), ``process`` (exits, forks, children, threads of a run), ``proctree`` (a
  command's processes), ``audit`` (the one audit hook the guard and the process tracking share);
* what a report names: ``frames`` (the loop's own line in a traceback).
"""
