"""The run's clients (`Clients`): the SDK and httpx2 clients whose requests reach the simulated API.

Built on first use, as fresh clients of the SDKs' defaults (retries included), each quickly: a shallow copy of a
never-used prototype with its http client or transport swapped in, where the prototype proves the copy complete.
"""

from __future__ import annotations

import copy
import functools
import inspect
import sys
from typing import TYPE_CHECKING, Any

from simloop._runtime.process import FAKE_OPENAI_KEY
from simloop._runtime.watchdog import Watchdog
from simloop.errors import UsageError

if TYPE_CHECKING:
    import httpx2

    from simloop._sim.guard import Guard
    from simloop.wire.server import SimServer

__all__ = ["API_KEY", "BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "Clients"]

API_KEY = "sk-ant-simloop-0000000000000000000000000000000000000000"  # a fake key: the simulator accepts any
BASE_URL = "https://api.anthropic.com"
OPENAI_BASE_URL = "https://api.openai.com/v1"
OPENAI_API_KEY = FAKE_OPENAI_KEY  # fake: the simulator takes any


class Clients:
    """One run's clients, by kind, built on first use (simloop's own set-up: the watchdog is paused meanwhile).

    It holds the server and the guard's callbacks, never the Sim: a finished run is freed by reference counting.
    """

    __slots__ = ("_built", "_guard", "_server", "_watchdog")

    def __init__(self, server: SimServer, guard: Guard, watchdog: Watchdog) -> None:
        self._server, self._guard, self._watchdog = server, guard, watchdog
        self._built: dict[str, Any] = {}

    def _get(self, kind: str, build: Any) -> Any:
        client = self._built.get(kind)
        if client is None:
            with self._watchdog.paused():  # (imported before the run already: see simloop._runtime.prepare)
                client = self._built[kind] = build()
        return client

    def http(self) -> Any:
        """An httpx2 client on the in-process transport."""
        def build() -> Any:
            import httpx2

            from simloop.wire.transport import SimTransport

            return _http_client(httpx2.Client, SimTransport(self._server, sleep=self._guard.sleep,
                                                            world=self._guard.world))
        return self._get("http", build)

    def async_http(self) -> Any:
        def build() -> Any:
            import httpx2

            from simloop.wire.transport import AsyncSimTransport

            return _http_client(httpx2.AsyncClient, AsyncSimTransport(self._server, sleep=self._guard.sleep,
                                                                      world=self._guard.world))
        return self._get("ahttp", build)

    def anthropic(self, is_async: bool) -> Any:
        """An ``anthropic`` SDK client (async or not) on the http client of its kind."""
        def build() -> Any:
            import anthropic

            if is_async:
                return _sdk_client(anthropic.AsyncAnthropic, self.async_http())
            return _sdk_client(anthropic.Anthropic, self.http())
        return self._get("async" if is_async else "sync", build)

    def openai(self, is_async: bool) -> Any:
        """An ``openai`` SDK client (async or not) on the Chat Completions wire."""
        return self._get("aopenai" if is_async else "openai",
                         lambda: _openai_client(is_async, self.async_http() if is_async else self.http()))

    def close(self) -> None:
        """Close the clients (idempotent)."""
        # Only the http clients hold anything (the transport holds the run); closing an SDK client too
        # would only close its http client, after a runtime protocol check that costs more than a request.
        http = self._built.get("http")
        for name in ("sync", "async"):
            if name in self._built:
                _drop_resources(self._built[name])
        self._built.clear()
        if http is not None:
            http.close()


@functools.cache
def _base_url() -> httpx2.URL:
    # Parsed once: URL parsing is a good part of building a client, and each Sim builds its own.
    # The trailing slash is the one the clients would add.
    import httpx2

    return httpx2.URL(BASE_URL + "/")

def _sdk_client(cls: Any, http_client: Any) -> Any:
    """A new SDK client of ``cls`` (with SDK defaults) whose requests go through ``http_client``.

    Building an ``anthropic`` client takes about 100 µs (credential discovery, runtime protocol checks),
    and every Sim builds one.  A shallow copy of a prototype that was never used, with its http client
    swapped, is the same fresh client for a twentieth of that.  The prototype proves the swap is
    complete (the http client is held in exactly one attribute); otherwise the client is built.
    """
    proto, slot = _prototype(cls)
    if slot is None:
        return cls(api_key=API_KEY, base_url=_base_url(), http_client=http_client)
    if _plain_copy(cls):  # what copy.copy does for such a class, without its generic machinery
        client = cls.__new__(cls)
        vars(client).update(vars(proto))
    else:
        client = copy.copy(proto)
    setattr(client, slot, http_client)
    return client


@functools.cache
def _plain_copy(cls: Any) -> bool:
    """Whether ``copy.copy`` of a ``cls`` instance is ``cls.__new__(cls)`` with the instance's ``__dict__``:
    no class in its MRO has copy or pickle hooks, or slots holding state."""
    hooks = ("__copy__", "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__getnewargs__",
             "__getnewargs_ex__")
    return all(not any(h in vars(k) for h in hooks) and not vars(k).get("__slots__") for k in cls.__mro__[:-1])


def _http_client(cls: Any, transport: Any) -> Any:
    """A new httpx2 client of ``cls`` on ``transport`` with simloop's base URL, as ``cls(transport=..., base_url=...)``.

    Building one takes some 45 µs (default headers, cookie jar, URL and timeout objects), and every Sim
    builds one.  A shallow copy of a never-used prototype, with its own transport, headers, cookies, event
    hooks and mounts, is the same fresh client for a fraction of that.  The prototype proves the copy is
    complete: every other attribute holds an immutable value; otherwise the client is built.
    """
    proto = _http_prototype(cls)
    if proto is None:
        return cls(transport=transport, base_url=_base_url())
    client = cls.__new__(cls)
    state = vars(client)
    state.update(vars(proto))
    state["_transport"] = transport
    state["_headers"] = proto._headers.copy()
    state["_cookies"] = type(proto._cookies)()
    state["_event_hooks"] = {"request": [], "response": []}
    state["_mounts"] = {}
    return client


@functools.cache
def _http_prototype(cls: Any) -> Any:
    import enum

    import httpx2

    placeholder = httpx2.AsyncBaseTransport() if "Async" in cls.__name__ else httpx2.BaseTransport()
    proto = cls(transport=placeholder, base_url=_base_url())
    immutable = (httpx2.URL, httpx2.QueryParams, httpx2.Timeout, bool, int, str, type(None), enum.Enum)
    fresh: dict[str, Any] = {  # the attributes a copy gets anew, as a new client holds them
        "_transport": lambda v: v is placeholder,
        "_headers": lambda v: type(v) is httpx2.Headers,
        "_cookies": lambda v: type(v) is httpx2.Cookies and not len(v),
        "_event_hooks": lambda v: v == {"request": [], "response": []},
        "_mounts": lambda v: v == {},
    }
    for name, value in vars(proto).items():
        check = fresh.pop(name, None)
        if not (check(value) if check is not None else isinstance(value, immutable)):
            return None
    return None if fresh else proto


def _drop_resources(client: Any) -> None:
    """Forget the SDK client's cached resources (``client.messages``, ``client.beta``): built again if used.

    Each holds the client's bound methods, and the client holds it: a reference cycle that keeps the client,
    its http client and everything they hold alive until the garbage collector finds them.  A Sim builds a
    client per run, and a collection of that garbage costs far more than freeing it as the run ends.
    """
    cached = vars(client)
    cls: Any = type(client)
    for name in _cached_properties(cls).intersection(cached):  # (the ones the run used: a few of ~20)
        if getattr(cached[name], "_client", None) is client:
            del cached[name]


@functools.cache
def _cached_properties(cls: Any) -> frozenset[str]:
    """The names of ``cls``'s cached properties (an SDK client's resources), worked out once per class."""
    return frozenset(name for name in dir(cls)
                     if isinstance(inspect.getattr_static(cls, name), functools.cached_property))


@functools.cache
def _prototype(cls: Any) -> tuple[Any, str | None]:
    import httpx2

    placeholder: Any = (  # never sends: a bare transport, not the default one (that loads TLS certificates)
        httpx2.AsyncClient(transport=httpx2.AsyncBaseTransport())
        if "Async" in cls.__name__
        else httpx2.Client(transport=httpx2.BaseTransport())
    )
    proto = _known_platform(cls(api_key=API_KEY, base_url=_base_url(), http_client=placeholder))
    slots = [name for name, value in vars(proto).items() if value is placeholder]
    return proto, slots[0] if len(slots) == 1 else None


def _known_platform(client: Any) -> Any:
    """``client`` with the platform its headers name looked up already, as the SDK's own async client does on its
    first request (``X-Stainless-OS``): there, on a worker thread (``asyncify(get_platform)``), about 1 ms of every
    run's first async call that the same lookup here, once per process, saves.  A sync client looks it up per header
    set, cached; an SDK release without the attribute is left as it is."""
    if vars(client).get("_platform", 0) is None:
        get_platform = getattr(sys.modules.get(type(client).__module__.split(".")[0] + "._base_client"), "get_platform", None)
        if callable(get_platform):
            client._platform = get_platform()
    return client



def _openai_client(is_async: bool, http_client: Any) -> Any:
    """An ``openai`` SDK client (async or not) whose requests go through ``http_client`` to the simulated API."""
    try:
        import openai
    except ImportError:
        raise UsageError(
            "sim.openai_client needs the openai SDK: pip install 'simloop[openai]' (or pip install 'openai>=3.50,<4')"
        ) from None
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    return _known_platform(cls(api_key=OPENAI_API_KEY, base_url=OPENAI_BASE_URL, http_client=http_client))

