"""The server's parts (`simloop.wire`) work alone, without a `SimServer`: each concern is testable by itself.

`CallNumbers` numbers model calls as the SDK's retries require, `MessageThreads` keeps what a ``continue``
request stands for (and refuses what the real API refuses), `ReplyKinds` answers each reply's kind once.
"""

from __future__ import annotations

from typing import Any

from simloop.scenario import Reply
from simloop.wire.answer import ReplyKinds
from simloop.wire.bodies import CallNumbers
from simloop.wire.threads import MAX_THREADS, MessageThreads


def test_call_numbers_join_retries_to_their_call_and_resends_to_a_new_one() -> None:
    numbers = CallNumbers()
    assert [numbers.number(0, b"a"), numbers.number(1, b"a"), numbers.number(0, b"b"), numbers.number(0, b"a"),
            numbers.number(2, b"a"), numbers.number(1, b"b")] == [1, 1, 2, 3, 3, 2]
    assert numbers.calls == 3


def _message(id: str, text: str) -> dict[str, Any]:
    return {"id": id, "stop_reason": "end_turn", "content": [{"type": "text", "text": text}]}


def test_a_thread_continuation_stands_for_its_whole_history_once() -> None:
    threads = MessageThreads()
    first = {"model": "m", "system": "be brief", "messages": [{"role": "user", "content": "hi"}],
             "thread": {"type": "new"}}
    effective, history, refused = threads.expand(first)
    assert (effective, history, refused) == (first, 0, None)
    threads.store(first, effective, _message("msg_1", "hello"))
    more = {"model": "m", "messages": [{"role": "user", "content": "again"}],
            "thread": {"type": "continue", "previous_message_id": "msg_1"}}
    effective, history, refused = threads.expand(more)
    assert refused is None and effective["system"] == "be brief" and history > 0
    assert [m["role"] for m in effective["messages"]] == ["user", "assistant", "user"]
    threads.store(more, effective, _message("msg_2", "hello again"))
    rejection = threads.expand(more)[2]  # msg_1's thread was continued already
    assert rejection is not None and rejection.details == {"error_code": "thread_already_continued"}
    unknown = {**more, "thread": {"type": "continue", "previous_message_id": "msg_9"}}
    rejection = threads.expand(unknown)[2]
    assert rejection is not None and rejection.details == {"error_code": "thread_not_found"}


def test_the_threads_kept_are_bounded_and_a_continuation_of_a_dropped_one_is_not_found() -> None:
    threads = MessageThreads()
    for i in range(MAX_THREADS + 10):  # before: every thread was kept for good (a client could grow simloop serve)
        new = {"model": "m", "messages": [{"role": "user", "content": f"hi {i}"}], "thread": {"type": "new"}}
        threads.store(new, new, _message(f"msg_{i}", "hello"))
    assert len(threads._threads) == MAX_THREADS

    def continuing(id: str) -> Any:
        return threads.expand({"model": "m", "messages": [{"role": "user", "content": "more"}],
                               "thread": {"type": "continue", "previous_message_id": id}})[2]

    assert continuing(f"msg_{MAX_THREADS + 9}") is None and continuing("msg_10") is None
    dropped = continuing("msg_9")
    assert dropped is not None and dropped.details == {"error_code": "thread_not_found"}


def test_reply_kinds_are_the_replies_own() -> None:
    kinds = ReplyKinds()
    end, fault = Reply(end_turn="done"), Reply(error=529)
    assert [kinds.kind(end), kinds.kind(fault), kinds.kind(end)] == [end.kind, fault.kind, end.kind]
    assert fault.kind == "error" and end.kind != "error"


def test_the_server_answers_one_request_at_a_time_whatever_thread_calls() -> None:
    """Parallel sub-agents call from several threads: a request's parse, checks and reply must not interleave with
    another's (before: the second thread's request ran inside the first's model call).  No clock is read: the first
    model call waits until the second request is either inside its own model call or held at the server's door."""
    import inspect
    import json
    import random
    import sys
    import threading

    from simloop.models import Ids, ModelRequest
    from simloop.transcript import Header, Transcript
    from simloop.wire.server import SimServer

    lines, first_line = inspect.getsourcelines(SimServer.handle)
    door = next((n for n, line in enumerate(lines, first_line) if "with self._one_at_a_time" in line), -1)
    first_in, second_in = threading.Event(), threading.Event()
    second_thread: list[int] = []
    overlapped: list[bool] = []

    def held_at_the_door() -> bool:
        frame = sys._current_frames().get(second_thread[0]) if second_thread else None
        return frame is not None and frame.f_code is SimServer.handle.__code__ and frame.f_lineno == door

    class Policy:
        def reply(self, request: ModelRequest) -> Reply:
            if not first_in.is_set():
                first_in.set()
                while not (second_in.is_set() or held_at_the_door()):
                    pass  # (the other thread runs at the interpreter's next switch)
                overlapped.append(second_in.is_set())
            else:
                second_in.set()
            return Reply(end_turn="done")

        def leftovers(self) -> list[str]:
            return []

    server = SimServer(Policy(), Transcript(header=Header(scenario="one-at-a-time", seed=0)),
                       ids=Ids(random.Random(0)), now=lambda: 0.0)
    body = json.dumps({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}).encode()
    statuses: list[int] = []

    def call() -> None:
        statuses.append(server.handle("POST", "/v1/messages", {"x-api-key": "k"}, body).status)

    first = threading.Thread(target=call)
    first.start()
    assert first_in.wait(10)
    second = threading.Thread(target=call)
    second.start()
    second_thread.append(second.ident or 0)
    first.join(10)
    second.join(10)
    assert overlapped == [False] and statuses == [200, 200]
