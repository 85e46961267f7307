"""`on_fresh_stack`: the loop under test is called on stack space of its own, and otherwise as usual."""

from __future__ import annotations

import sys

import pytest

from simloop._runtime.stack import _SLOTS, on_fresh_stack


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
