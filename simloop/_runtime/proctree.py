"""The processes of a command simloop runs (`simloop.command`): found wherever they went, and ended.

A command's process group is not enough: a daemon that calls ``setsid`` (or double-forks) leaves the
group, and one that holds the command's stdout would keep a run waiting for as long as it lives.  So a
`Tree` counts as the command's every process that

1. is the command, or is in its process group or its session (the command starts a session of its own);
2. carries the run's marker in its environment (``SIMLOOP_RUN_ID``, inherited by whatever it starts, in any
   session, unless a process clears its environment);
3. descends from one of those (its parent is one);
4. on Linux, was orphaned into simloop's own process: while a command runs, simloop is a child subreaper
   (``prctl(PR_SET_CHILD_SUBREAPER)``), so a descendant whose parent died is re-parented to simloop instead
   of to init, and one that started after the command, in a session of its own, is the command's.

Rules 2 and 4 look only at processes that started after the command (``/proc/PID/stat``'s start time), so
a scan reads the environment of a handful of processes, not of the whole machine.

`Tree.end` kills them all (SIGKILL, in rounds until none is left, so that a child forked meanwhile goes
too) and reaps the adopted orphans, killed or ended on their own (else a zombie per run).  `end_all` ends
every live tree: simloop's SIGTERM handler, a campaign worker's exit and the interpreter's call it with
``final``, after which a command another thread is starting is ended as soon as it starts.  Rules 2 to 4
read ``/proc`` (Linux); elsewhere the process group alone is killed.  None of this outlives a SIGKILL of
simloop itself: what the command started then lives on (its process group and session, named by the
command's pid, can be killed by hand).
"""

from __future__ import annotations

import _thread
import atexit
import ctypes
import ctypes.util
import itertools
import os
import secrets
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MARKER", "Tree", "end_all"]

#: the environment variable that marks a run's processes
MARKER = "SIMLOOP_RUN_ID"
_PROC = Path("/proc")
_PR_SET_CHILD_SUBREAPER = 36
_ROUNDS = 20  # kill rounds at most: a process forked between a scan and its kill is found by the next scan
_LIVE: dict[int, Tree] = {}  # id -> tree, while its command may run
_STARTING: dict[int, Tree] = {}  # id -> tree, from `prepare` to the end of `start`
_START_WAIT_S = 2.0  # real seconds a final `end_all` waits for a command being started to be started (and ended)
_LOCK = threading.Lock()
_ids = itertools.count(1)


@dataclass(frozen=True)
class _Stat:
    pid: int
    state: str
    ppid: int
    pgrp: int
    session: int
    start: int  # clock ticks after boot: a pid reused later has a later start


class Tree:
    """The processes of one command run: `start` it with the command's pid, `end` it when the run ends."""

    def __init__(self) -> None:
        self.token = f"{os.getpid()}-{next(_ids)}-{secrets.token_hex(4)}"
        self.root: int | None = None
        self._since = 0  # clock ticks after boot, a little before the command started: its processes start later
        self._children_before: set[int] = set()
        self._killed: dict[int, int] = {}  # pid -> its start time (a pid may be reused later)
        self._lock = threading.Lock()
        self._ended = False
        self._starting = _thread.allocate_lock()  # held from `prepare` to the end of `start`

    @property
    def env(self) -> dict[str, str]:
        """The variable to put in the command's environment."""
        return {MARKER: self.token}

    def prepare(self) -> None:
        """Before the command starts: become a subreaper (Linux) and note simloop's own children."""
        self._starting.acquire()
        with _LOCK:
            if not _LIVE:
                _subreaper(True)
            _LIVE[id(self)] = self
            _STARTING[id(self)] = self
        self._since = _ticks_now() - 2  # (uptime and start times have a tick's resolution)
        self._children_before = _children()

    def start(self, pid: int | None) -> None:
        """The command started as ``pid`` (a session leader).

        Ended at once if `end` came first, or if simloop is stopping (`end_all` with ``final``): the thread that
        starts a command is not the one a SIGTERM or a Ctrl-C interrupts.
        """
        try:
            with self._lock:
                self.root = pid
                ended = self._ended or _Closing.closed
            if ended:
                self.end()
        finally:
            with _LOCK:
                _STARTING.pop(id(self), None)
            if self._starting.locked():
                self._starting.release()

    def not_started(self) -> None:
        """The command could not be started (`prepare` was called): nothing to wait for."""
        self.start(None)

    def end(self) -> int:
        """Kill every process of the command (see the module's rules); returns how many were killed one by one.

        (Those the process group's kill took are not counted.)
        """
        with self._lock:
            self._ended = True
            try:
                return self._end()
            finally:
                with _LOCK:
                    _LIVE.pop(id(self), None)
                    if not _LIVE:
                        _subreaper(False)

    def _end(self) -> int:
        if not hasattr(os, "killpg"):
            return 0  # (Windows: the caller kills the command itself)
        if self.root is not None:
            _kill_group(self.root)
        if not _PROC.is_dir():
            return 0
        killed = 0
        me = os.getpid()
        for _ in range(_ROUNDS):
            members = self.members()
            for s in members:  # an orphan that ended on its own is simloop's to reap (else a zombie per run)
                if s.state == "Z" and s.ppid == me and s.pid != self.root:
                    _reap_one(s.pid)
            alive = [s for s in members if s.state not in "ZX" and self._killed.get(s.pid) != s.start]
            if not alive:
                break
            for s in alive:
                try:
                    os.kill(s.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    continue
                self._killed[s.pid] = s.start
                killed += 1
        self._reap()
        return killed

    def members(self) -> list[_Stat]:
        """The command's processes now (Linux ``/proc``; dead ones not yet reaped included).

        Before `start` (the command is being started), those that carry the marker.
        """
        me, mine_session = os.getpid(), os.getsid(0)
        stats = [s for s in _scan() if s.pid != me]
        found: dict[int, _Stat] = {}
        needle = f"\0{MARKER}={self.token}\0".encode()
        for s in stats:
            if self._owns(s, me, mine_session, needle):
                found[s.pid] = s
        grew = True
        while grew:  # and everything they started
            grew = False
            for s in stats:
                if s.pid not in found and s.ppid in found:
                    found[s.pid] = s
                    grew = True
        return list(found.values())

    def _owns(self, s: _Stat, me: int, mine_session: int, needle: bytes) -> bool:
        """Rules 1, 2 and 4 of the module's (rule 3, descent, is the caller's), and the processes killed already."""
        if self.root in (s.pid, s.pgrp, s.session) or self._killed.get(s.pid) == s.start:
            return True
        if s.start < self._since:
            return False  # older than the command: none of its own (and its environment need not be read)
        if s.ppid == me and s.pid not in self._children_before \
                and s.session != mine_session and not _claimed(s, self):
            return True  # an orphan of the command's, re-parented to simloop (see _subreaper)
        return _environ_has(s.pid, needle)

    def _reap(self) -> None:
        """Collect the exit of each killed process that is (or becomes) simloop's child: an orphan it adopted.

        Waits up to a second of real time: SIGKILL lands at once (unless a process is in an uninterruptible
        wait), and a killed grandchild becomes simloop's only when its killed parent is gone.
        """
        pause = _thread.allocate_lock()
        pause.acquire()
        for _ in range(100):
            for pid, start in list(self._killed.items()):
                if pid == self.root:
                    continue  # the command itself: its Popen waits for it
                try:
                    done, _ = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:  # not simloop's child (yet): gone, or its parent's to reap
                    stat = _stat(pid)
                    waits = stat is not None and stat.start == start and stat.ppid in self._killed
                    done = 0 if waits else pid
                if done:
                    del self._killed[pid]
            if not any(pid != self.root for pid in self._killed):
                return
            pause.acquire(timeout=0.01)  # a real pause: this thread's time.sleep may be a run's virtual one


class _Closing:
    closed = False  # simloop is stopping: a command started from now on is ended at once


def end_all(*, final: bool = False) -> int:
    """End every live command's tree; returns how many trees there were.

    ``final``: simloop is stopping (a SIGTERM, the end of a campaign's worker, the interpreter's exit), so a
    command that another thread starts from now on is ended as soon as it starts.
    """
    with _LOCK:
        if final:
            _Closing.closed = True
        trees = list(_LIVE.values())
        starting = list(_STARTING.values())
    for tree in trees:
        tree.end()
    if final:  # a command another thread is starting now is ended by its `start`: wait for that, briefly
        for tree in starting:
            if tree._starting.acquire(timeout=_START_WAIT_S):
                tree._starting.release()
    return len(trees)


atexit.register(end_all, final=True)  # (a daemon thread may start a command while the interpreter exits)


def _claimed(stat: _Stat, tree: Tree) -> bool:
    """Whether another live tree of this process counts ``stat`` as its own."""
    with _LOCK:
        others = [t for t in _LIVE.values() if t is not tree]
    return any(stat.session == t.root or stat.pgrp == t.root or stat.pid == t.root for t in others)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)  # the group outlives its leader while a member lives
    except (ProcessLookupError, PermissionError):
        pass


def _scan() -> list[_Stat]:
    if not _PROC.is_dir():
        return []
    out = []
    for entry in os.listdir(_PROC):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                out.append(stat)
    return out


def _children() -> set[int]:
    """simloop's own children now: from ``/proc/self/task/*/children`` where the kernel has it, else a scan."""
    found: set[int] = set()
    try:
        for task in os.listdir("/proc/self/task"):
            found.update(int(pid) for pid in _read(f"/proc/self/task/{task}/children").split())
    except (OSError, ValueError):
        me = os.getpid()
        return {s.pid for s in _scan() if s.ppid == me}
    return found


def _ticks_now() -> int:
    """Now, in the clock ticks after boot that ``/proc/PID/stat`` gives start times in (0 where unknown)."""
    try:
        return int(float(_read("/proc/uptime").split()[0]) * os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _stat(pid: int) -> _Stat | None:
    try:
        text = _read(f"/proc/{pid}/stat").decode(errors="replace")
    except OSError:
        return None
    # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses, so split after the last ")"
    fields = text[text.rfind(")") + 2:].split()
    try:
        return _Stat(pid, fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))
    except (IndexError, ValueError):
        return None


def _reap_one(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        data = _read(f"/proc/{pid}/environ")
    except OSError:  # another user's process, or gone
        return False
    return needle in b"\0" + data + b"\0"


_libc: ctypes.CDLL | None = None


def _subreaper(on: bool) -> bool:
    """Make simloop's process a child subreaper (Linux 3.4+), or stop being one; False where unavailable."""
    global _libc
    if not hasattr(os, "uname") or os.uname().sysname != "Linux":
        return False
    try:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return int(_libc.prctl(_PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False
