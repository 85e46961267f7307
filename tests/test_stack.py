"""`on_fresh_stack`: the loop under test is called on stack space of its own, and otherwise as usual."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

from simloop._runtime.stack import _SLOTS, hold_fresh_stack, on_fresh_stack, on_held_stack


def test_calls_with_the_arguments_and_returns_the_result() -> None:
    assert on_fresh_stack(lambda a, b: (a, b), 1, "x") == (1, "x")


def test_an_exception_passes_through_with_the_callers_traceback() -> None:
    def boom() -> None:
        raise ValueError("from the loop")

    with pytest.raises(ValueError, match="from the loop") as info:
        on_fresh_stack(boom)
    assert info.traceback[-1].name == "boom"


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="the frame size is CPython's")
def test_its_frame_is_larger_than_a_default_stack_chunk() -> None:
    # a chunk starts at 16 KiB (2048 slots): a frame this size can only open a chunk of its own
    assert on_fresh_stack.__code__.co_stacksize >= _SLOTS > 2048


def test_deep_calls_above_it_work() -> None:
    def down(n: int) -> int:
        return n if n == 0 else 1 + down(n - 1)

    assert on_fresh_stack(down, 600) == 600


def _spacers(frame: Any) -> int:
    """How many `on_fresh_stack` frames are below ``frame`` (each one a stack chunk mapped for it)."""
    n = 0
    while frame is not None:
        n += frame.f_code is on_fresh_stack.__code__
        frame = frame.f_back
    return n


def test_on_held_stack_maps_a_chunk_only_outside_a_thread_that_holds_one() -> None:
    assert on_held_stack(lambda: _spacers(sys._getframe())) == 1  # this thread holds none: a chunk of its own
    seen: list[int] = []
    thread = threading.Thread(target=hold_fresh_stack, args=(lambda: seen.append(on_held_stack(
        lambda: _spacers(sys._getframe()))),))
    thread.start()
    thread.join()
    assert seen == [1]  # the held chunk only: no second mapping


def test_a_sims_loop_runs_on_its_workers_held_chunk_run_after_run() -> None:
    import simloop

    seen: list[int] = []

    def drive(sim: simloop.Sim) -> tuple[str, str]:
        seen.append(_spacers(sys._getframe()))
        return ("final", "")

    for _ in range(2):
        with simloop.Sim({"task": "t", "model": [{"end_turn": "ok"}]}) as sim:
            sim.run(drive)
    assert seen == [1, 1]  # on a chunk of its own (the worker's), not one mapped and unmapped per run


def test_a_forked_child_keeps_only_the_forking_threads_hold() -> None:
    from simloop._runtime import stack

    me = threading.get_ident()
    saved = set(stack._HELD)
    try:
        stack._HELD.clear()
        stack._HELD.update({me, me + 1})  # this thread and a thread the child does not have
        stack._after_fork()
        assert stack._HELD == {me}
        stack._HELD.discard(me)
        stack._HELD.add(me + 1)
        stack._after_fork()
        assert stack._HELD == set()  # its ident may be reused by a new thread of the child
    finally:
        stack._HELD.clear()
        stack._HELD.update(saved)
