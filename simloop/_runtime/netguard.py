"""The network guard: while a Sim runs, the loop under test cannot open a real network connection.

A loop that builds its own ``anthropic.Anthropic()`` bypasses the simulator: its requests go to the
real API (with the user's key, billed), and the run checks nothing.  The Sim's own clients never touch
a socket (the simulated API is an in-process httpx2 transport), so during a run a host-name lookup or
a socket connection from the loop's threads is the loop reaching past the Sim.

An audit hook (`sys.addaudithook`, PEP 578) sees every ``socket.getaddrinfo``, ``socket.connect``, ...
of the process.  Audit hooks cannot be removed, so the hook is installed once, on the first guarded
run, and acts only in threads that run on a guarded Sim's clock: the drive's thread and the threads
it starts (the scoping of virtual time, `simloop._runtime.clock`; threads started with ``_thread.start_new_thread`` and a
pool's thread while it runs a job the run submitted are the run's too: `simloop._runtime.process`).  simloop's own threads, the loopback server
(``simloop serve``), the test runner and every thread outside a run are never affected.  The hook's
cost outside a socket event is one set lookup per audit event (one hook for the guard and the process
tracking: `simloop._runtime.audit`).

Policies (``Sim(..., network=...)``, ``verify(..., network=...)``, ``simloop verify/run --network``):

* ``block`` (the default): every internet connection and host-name lookup is blocked;
* ``loopback``: connections to this machine (127.0.0.0/8, ::1, ``localhost``) are allowed, for loops
  that legitimately reach a local service (a database, a tool server); others are blocked.  A name is
  allowed only where its addresses are known to be loopback: ``localhost`` when this machine resolves it to
  loopback addresses only, and ``*.localhost``: ``socket.getaddrinfo``, ``gethostbyname`` and a socket's
  ``connect`` answer both with 127.0.0.1 and ::1 without a query (RFC 6761, `_resolve_locally`); a
  ``*.localhost`` name handed to the system's resolver another way (``_socket`` itself, ``sendto``) would go
  wherever DNS points it, and is blocked;
* ``allow``: the guard is off.

A raw packet socket (``AF_PACKET``: frames sent with no address the guard could check) is blocked when it is
made.  Unix-domain sockets are always allowed: they are not network, and so is simloop's own MCP server of the run
(``sim.mcp_url``, on a loopback port `allow_own_port` names, whatever the policy); another loopback port is not.  A blocked attempt raises `LoopHalted`
("network") in the thread that made it, which ``except Exception`` cannot swallow, and the run records
a `Halt` naming the host and the loop's line (reported by the ``stops`` invariant).
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from simloop._runtime.audit import on_events
from simloop._runtime.clock import VirtualClock
from simloop._runtime.registry import threads as _threads
from simloop._runtime.watchdog import where_of
from simloop.errors import UsageError

__all__ = ["POLICIES", "NetworkPolicy", "allow_own_port", "check_policy", "guarding", "simloops_own"]

NetworkPolicy = Literal["block", "loopback", "allow"]
POLICIES: tuple[str, ...] = ("block", "loopback", "allow")

# What the guard looks at: name lookups, connections, datagrams sent to an address, and a raw packet socket made.
_EVENTS = frozenset({
    "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr",
    "socket.getnameinfo", "socket.connect", "socket.sendto", "socket.sendmsg", "socket.__new__",
})
#: Socket families whose frames reach the network with no address to check (Linux ``AF_PACKET``, with
#: CAP_NET_RAW): making such a socket in a run is blocked, whatever the policy but ``allow``.
_RAW_FAMILIES = frozenset(f for f in (getattr(socket, "AF_PACKET", None),) if f is not None)
RAW_TARGET = "the raw network (an AF_PACKET socket)"
_LOOKUPS = frozenset({"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex",
                      "socket.gethostbyaddr"})
_INTERNET = (socket.AF_INET, socket.AF_INET6)

#: What a blocked attempt calls: (host:port, the loop's FILE:LINE) -> the exception to raise.
OnBlocked = Callable[[str, str], BaseException]

_GUARDS: dict[VirtualClock, tuple[str, OnBlocked]] = {}  # a guarded run's clock -> (policy, on_blocked)
_get_ident = threading.get_ident
_installed: list[bool] = []
_OWN: set[int] = set()  # threads inside `simloops_own`: simloop's own sockets, in a guarded thread
_OWN_PORTS: set[int] = set()  # loopback ports of simloop's own servers that a run's loop may reach (``sim.mcp_url``)


def check_policy(network: object) -> NetworkPolicy:
    """``network`` if it is a policy name; else a `simloop.UsageError` saying what is allowed."""
    if network not in POLICIES:
        raise UsageError(
            f"network={network!r} is not a network policy; use 'block' (the default: a loop under test reaches "
            "the model only through the Sim), 'loopback' (also allow connections to this machine, for a loop "
            "that uses a local service) or 'allow' (no guard)"
        )
    return network  # type: ignore[return-value]


def guarding(clock: VirtualClock, policy: NetworkPolicy, on_blocked: OnBlocked) -> _Guarding:
    """Apply ``policy`` to the threads running on ``clock`` until the block exits."""
    return _Guarding(clock, policy, on_blocked)


class _Guarding:
    """`guarding`'s block: a plain context manager (no generator: it is entered at every run)."""

    __slots__ = ("clock", "on_blocked", "policy")

    def __init__(self, clock: VirtualClock, policy: NetworkPolicy, on_blocked: OnBlocked) -> None:
        self.clock, self.policy, self.on_blocked = clock, policy, on_blocked

    def __enter__(self) -> None:
        if self.policy == "allow":
            return
        if not _installed:
            on_events(_EVENTS, _audit)
            socket.getaddrinfo, socket.gethostbyname, socket.gethostbyname_ex = (
                _getaddrinfo, _gethostbyname, _gethostbyname_ex)
            socket.socket.connect, socket.socket.connect_ex = _connect, _connect_ex  # type: ignore[method-assign, assignment]
            _installed.append(True)
        _GUARDS[self.clock] = (self.policy, self.on_blocked)

    def __exit__(self, *exc: object) -> None:
        if self.policy != "allow":
            _GUARDS.pop(self.clock, None)


def allow_own_port(port: int) -> Callable[[], None]:
    """Let every run reach simloop's own server on loopback ``port`` (whatever its policy); returns the undo."""
    _OWN_PORTS.add(port)
    return lambda: _OWN_PORTS.discard(port)


@contextmanager
def simloops_own() -> Iterator[None]:
    """Sockets the current thread opens in the block are simloop's own (the loopback server of a command
    drive, which runs in the drive's thread), not the loop's: the guard lets them be."""
    ident = _get_ident()
    _OWN.add(ident)
    try:
        yield
    finally:
        _OWN.discard(ident)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # (simloop._runtime.audit's hook calls this for the events in _EVENTS only)
    if not _GUARDS:
        return
    ident = _get_ident()
    if ident in _OWN:
        return
    clock = _threads.get(ident)
    guard = _GUARDS.get(clock) if clock is not None else None
    if guard is None:
        return
    target = _target(event, args)
    if target is None:
        return
    host, port = target
    if _OWN_PORTS and _is_own(host, port):
        return
    policy, on_blocked = guard
    if policy == "loopback" and _is_loopback(host):
        return
    shown = f"{host}:{port}" if port is not None else host
    raise on_blocked(shown, where_of(sys._getframe(2), skip_libraries=True))  # (below the shared hook)


def _target(event: str, args: tuple[Any, ...]) -> tuple[str, Any] | None:
    """(host, port) an event reaches for, or None when it is not network (a Unix socket, a bind lookup)."""
    if event == "socket.getnameinfo":  # reverse DNS: args (sockaddr,)
        address = args[0] if args else None
        if not isinstance(address, tuple) or not address:
            return None
        host = address[0]
        return (host.decode("ascii", "replace") if isinstance(host, bytes) else str(host),
                address[1] if len(address) > 1 else None)
    if event == "socket.__new__":  # args (sock, family, type, proto)
        return (RAW_TARGET, None) if len(args) > 1 and args[1] in _RAW_FAMILIES else None
    if event in _LOOKUPS:
        host = args[0] if args else None
        if host is None:
            return None
        return (host.decode("ascii", "replace") if isinstance(host, bytes) else str(host),
                args[1] if event == "socket.getaddrinfo" and len(args) > 1 else None)
    sock, address = args[0], args[1] if len(args) > 1 else None
    if getattr(sock, "family", None) not in _INTERNET or not isinstance(address, tuple) or not address:
        return None
    host = address[0]
    return (host.decode("ascii", "replace") if isinstance(host, bytes) else str(host),
            address[1] if len(address) > 1 else None)


def _is_own(host: str, port: Any) -> bool:
    try:
        number = int(port)
    except (TypeError, ValueError):
        return False
    return number in _OWN_PORTS and host.strip("[]") in ("127.0.0.1", "::1", "localhost")


def _is_loopback(host: str) -> bool:
    name = host.strip("[]").lower()
    if name.rstrip(".") == "localhost":
        return _localhost_is_loopback()
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


# -- names under the loopback policy: ``*.localhost`` answered without a query (RFC 6761) ------------------------

_REAL_GETADDRINFO = socket.getaddrinfo
_REAL_GETHOSTBYNAME = socket.gethostbyname
_REAL_GETHOSTBYNAME_EX = socket.gethostbyname_ex
_REAL_CONNECT = socket.socket.connect
_REAL_CONNECT_EX = socket.socket.connect_ex
_LOOPBACKS = ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1"))


def _local_name(host: Any) -> bool:
    """Whether ``host`` is ``localhost`` or a name under it, which RFC 6761 has resolve to loopback."""
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    name = host.rstrip(".").lower() if isinstance(host, str) else ""
    return name == "localhost" or name.endswith(".localhost")


def _resolve_locally(host: Any) -> bool:
    """Whether the current thread is a run's under the loopback policy, looking up a ``localhost`` name."""
    if not _GUARDS or not _local_name(host):
        return False
    ident = _get_ident()
    clock = _threads.get(ident)
    guard = _GUARDS.get(clock) if clock is not None else None
    return guard is not None and guard[0] == "loopback" and ident not in _OWN


def _getaddrinfo(host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0) -> Any:
    """``socket.getaddrinfo``; in a run under the loopback policy, a ``localhost`` name is 127.0.0.1 and ::1."""
    if not _resolve_locally(host):
        return _REAL_GETADDRINFO(host, port, family, type, proto, flags)
    found: list[Any] = []
    for kind, address in _LOOPBACKS:
        if family in (socket.AF_UNSPEC, kind):
            with contextlib.suppress(socket.gaierror):  # (a machine without IPv6)
                found += _REAL_GETADDRINFO(address, port, kind, type, proto, flags | socket.AI_NUMERICHOST)
    if not found:
        raise socket.gaierror(socket.EAI_FAMILY, "ai_family not supported")
    return found


def _gethostbyname(host: Any) -> str:
    return "127.0.0.1" if _resolve_locally(host) else _REAL_GETHOSTBYNAME(host)


def _gethostbyname_ex(host: Any) -> tuple[str, list[str], list[str]]:
    return (str(host), [], ["127.0.0.1"]) if _resolve_locally(host) else _REAL_GETHOSTBYNAME_EX(host)


def _local_address(sock: socket.socket, address: Any) -> Any:
    """``address`` with a ``localhost`` name replaced by the loopback address of ``sock``'s family (in a run under
    the loopback policy): the socket module would hand the name to the system's resolver inside ``connect``."""
    if isinstance(address, tuple) and address and sock.family in _INTERNET and _resolve_locally(address[0]):
        return ("::1" if sock.family == socket.AF_INET6 else "127.0.0.1", *address[1:])
    return address


def _connect(self: socket.socket, address: Any) -> None:
    return _REAL_CONNECT(self, _local_address(self, address))


def _connect_ex(self: socket.socket, address: Any) -> int:
    return _REAL_CONNECT_EX(self, _local_address(self, address))


def _localhost_is_loopback() -> bool:
    """Whether this machine resolves ``localhost`` (its hosts file, most often) to loopback addresses only."""
    ident = _get_ident()
    _OWN.add(ident)  # simloop's own lookup: the guard lets it be
    try:
        found = _REAL_GETADDRINFO("localhost", None)
    except OSError:
        return False
    finally:
        _OWN.discard(ident)
    return bool(found) and all(_is_loopback(str(entry[4][0])) for entry in found)
