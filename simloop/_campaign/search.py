"""`Search`: how a campaign searches (the run's options), and the example database it keeps its failures in.

The world's options say what each run is made of (`simloop._campaign.world`); these say how many runs, from
which seed, checked against which invariants, with which Hypothesis settings and database, over how many
processes, where a failure is written, and what the loop may reach of the network.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import Phase
from hypothesis import settings as Settings

from simloop._campaign.schedule import CHUNK
from simloop._runtime.netguard import NetworkPolicy, check_policy
from simloop.errors import UsageError
from simloop.invariants import CATALOGUE

__all__ = ["DEFAULT_OUT", "REDIS_TIMEOUT_S", "Search", "example_database", "invariant_ids"]

DEFAULT_OUT = Path(".simloop") / "failures"  # where a failure's scenario file is written
REDIS_TIMEOUT_S = 5.0  # real seconds a redis:// database has to answer the PING made before a search


@dataclass(frozen=True)
class Search:
    """The run's options of a campaign, checked: one value, so that a new one is one field here.

    ``invariants`` are the ids checked after each run, in the order given; ``settings`` are the Hypothesis
    settings every chunk starts from (the caller's, else the loaded profile's; the database already in them);
    ``chunk`` is the most examples one Hypothesis run is given (see `simloop._campaign.schedule`).
    """

    max_examples: int = 200
    seed: int | None = None
    invariants: tuple[str, ...] = tuple(CATALOGUE)
    out_dir: Path = DEFAULT_OUT
    settings: Settings = field(default_factory=Settings)
    network: NetworkPolicy = "block"
    workers: int = 1
    chunk: int = CHUNK

    @classmethod
    def of(
        cls, *, max_examples: int, seed: int | None, invariants: Iterable[str] | None, out_dir: str | Path,
        settings: Settings | None, network: NetworkPolicy, workers: int, database: str | Path | Any, chunk: int,
    ) -> Search:
        """`verify`'s run arguments as a `Search`; a wrong one is a `UsageError` saying what to give."""
        check_policy(network)
        if not (isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1):
            raise UsageError(f"verify(workers=...): a number of processes, 1 or more; got {workers!r}")
        if database is not None:
            settings = Settings(settings or Settings(), database=example_database(database))
        return cls(
            max_examples=max_examples, seed=seed, invariants=tuple(invariant_ids(invariants)), out_dir=Path(out_dir),
            settings=settings or Settings(), network=network, workers=workers, chunk=chunk,
        )

    def replays_saved(self) -> bool:
        """Whether the saved failures of every stage are replayed before any stage searches (an unseeded search
        with a database and the reuse phase: a shared database may hold a failure of any stage)."""
        return self.seed is None and self.settings.database is not None and Phase.reuse in self.settings.phases


def invariant_ids(invariants: Iterable[str] | None) -> list[str]:
    """The invariant ids to check: all of the catalogue by default; an unknown id is a `UsageError`."""
    if invariants is None:
        return list(CATALOGUE)
    ids = list(invariants)
    unknown = [i for i in ids if i not in CATALOGUE]
    if unknown:
        raise UsageError(f"unknown invariant id(s) {', '.join(unknown)}; the ids are: {', '.join(CATALOGUE)}")
    return ids


def example_database(database: str | Path | Any) -> Any:
    """Hypothesis's example database for ``database``: a directory path, a ``redis://`` URL or a database as is.

    A Redis URL uses Hypothesis's own ``RedisExampleDatabase`` (``hypothesis.extra.redis``; needs the
    ``redis`` package): a fleet of CI machines pointed at one server replays what each of them found.

    Checked before any search starts: a path must be a directory or creatable as one, and a Redis server
    must answer a PING within `REDIS_TIMEOUT_S` seconds; otherwise `UsageError` says what to fix.
    """
    from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

    if isinstance(database, ExampleDatabase):
        return database
    if isinstance(database, (str, Path)):
        text = str(database)
        if text.startswith(("redis://", "rediss://", "unix://")):
            return _redis_database(text)
        _check_directory(Path(text))
        return DirectoryBasedExampleDatabase(text)
    raise UsageError(
        f"database: give a directory, a redis:// URL or a hypothesis ExampleDatabase; got {type(database).__name__}"
    )


def _redis_database(url: str) -> Any:
    """A `RedisExampleDatabase` on ``url``, once its server answered a PING."""
    try:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise UsageError(f"database {url!r} is a Redis URL, which needs the redis package: pip install redis") from None
    try:
        probe = redis.Redis.from_url(url, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S)
        try:
            probe.ping()
        finally:
            probe.close()
    except (redis.RedisError, ValueError, OSError) as e:
        raise UsageError(
            f"database {url!r}: the Redis server did not answer ({type(e).__name__}: {e}); start it, or check the "
            "URL (redis://HOST:PORT/DB), or leave the database out to use the local .hypothesis/examples"
        ) from None
    return RedisExampleDatabase(redis.Redis.from_url(url))


def _check_directory(path: Path) -> None:
    """``path`` is a directory, or one can be made there (its nearest existing parent is a writable directory)."""
    if path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            raise UsageError(f"database {str(path)!r} is a directory simloop cannot write to: give one you can write")
        return
    if path.exists():
        raise UsageError(
            f"database {str(path)!r} is a file, not a directory: give a directory (made if missing) or a redis:// URL"
        )
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(
            f"database {str(path)!r} cannot be made: {str(parent)!r} is not a directory simloop can write to; give a "
            "directory (made if missing) or a redis:// URL"
        )
