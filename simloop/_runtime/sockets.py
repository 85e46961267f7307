"""simloop's own servers as a virtual-time event loop sees them: which registered fd is a connection to one, and
whether work is in flight on it (`simloop._runtime.eventloop`; ``sim.mcp_url`` reads `unsent` for its side).

Linux only, where the socket queues can be read (``SIOCOUTQ``); elsewhere a loop counts every fd as real.
"""

from __future__ import annotations

import socket
import struct
import sys

__all__ = ["LINUX", "own_connection", "unsent"]

LINUX = sys.platform.startswith("linux")
_SYN_SENT = 2  # tcp_states.h


def unsent(fd: int) -> bool:
    """Whether a TCP socket holds bytes its peer has not yet received (Linux ``SIOCOUTQ``); False when unknown."""
    import fcntl  # (Unix only)
    import termios

    try:
        queued: int = struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    except OSError:
        return False
    return queued > 0



def own_connection(fd: int, ports: set[int]) -> bool | None:
    """For a TCP socket connected (or connecting) to one of ``ports`` on loopback: whether bytes or a handshake are in
    flight; None for any other fd."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
            return None
        try:
            host, port = sock.getpeername()[:2]
        except OSError:  # not connected yet: a handshake in flight counts as work (else the fd is nobody's)
            info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
            return True if info[0] == _SYN_SENT else None
        if port not in ports or not (host.startswith("127.") or host in ("::1", "::ffff:127.0.0.1")):
            return None
        return unsent(fd)
    except OSError:
        return None
    finally:
        sock.detach()

