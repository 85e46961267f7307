"""The wall clock's substitutes while a run is patched: ``datetime.datetime``/``datetime.date`` subclasses whose
``now``/``utcnow``/``today`` read the virtual wall clock in threads on a clock, and the pieces that keep them
harmless elsewhere (class statements naming them, pickling, pydantic's view of them).

Why our own subclasses and not time-machine: time-machine swaps the C functions for every thread at once and
refuses to start under freezegun; thread scoping matters more here (docs/design.md, Virtual time).  They are
built in a function and kept only in `simloop._runtime.registry.fakes`: freezegun's scan would rewrite a module
global that held them.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from simloop._runtime.realtime import REAL
from simloop._runtime.registry import fakes, get_ident, saved, threads

__all__ = ["REAL_DATETIME_MODULE", "REDUCERS"]

if TYPE_CHECKING:
    _DateBase = _dt.date
    _DatetimeBase = _dt.datetime
else:
    _DateBase, _DatetimeBase = REAL.date, REAL.datetime



class _DateMeta(type):
    """Our ``date``'s metaclass: a real date is an instance of ours, a real subclass a subclass."""

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, REAL.date)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, REAL.date)


class _DatetimeMeta(_DateMeta):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, REAL.datetime)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, REAL.datetime)


def _make_datetime_types() -> None:
    """Make our ``date`` and ``datetime`` and register them (and `_real_bases`) as the fakes of the real ones."""
    class date(_DateBase, metaclass=_DateMeta):
        def __new__(cls, *args: Any, **kwargs: Any) -> _dt.date:  # type: ignore[misc]
            return REAL.date(*args, **kwargs)  # objects made while patched are ordinary dates

        @classmethod
        def today(cls) -> _dt.date:  # type: ignore[override]
            clock = threads.get(get_ident())
            return REAL.date.today() if clock is None else clock._wall(None).date()

        @classmethod
        def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
            # pydantic (the SDK's models) may build a schema while we are patched: validate real dates.  Not
            # handler(REAL.date): pydantic before 2.14 knows the date type as `datetime.date`, read at that
            # moment, which is then this class, and fails on the real one (PydanticSchemaGenerationError)
            from pydantic_core import core_schema

            return core_schema.date_schema()

    class datetime(_DatetimeBase, metaclass=_DatetimeMeta):
        def __new__(cls, *args: Any, **kwargs: Any) -> _dt.datetime:  # type: ignore[misc]
            return REAL.datetime(*args, **kwargs)

        @classmethod
        def now(cls, tz: _dt.tzinfo | None = None) -> _dt.datetime:  # type: ignore[override]
            clock = threads.get(get_ident())
            return REAL.datetime.now(tz) if clock is None else clock._wall(tz)

        @classmethod
        def today(cls) -> _dt.datetime:  # type: ignore[override]
            return cls.now()

        @classmethod
        def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
            from pydantic_core import core_schema

            return core_schema.datetime_schema()

        @classmethod
        def utcnow(cls) -> _dt.datetime:  # type: ignore[override]
            clock = threads.get(get_ident())
            if clock is None:
                return REAL.datetime.now(_dt.UTC).replace(tzinfo=None)
            wall: _dt.datetime = clock._wall(_dt.UTC)
            return wall.replace(tzinfo=None)

    for cls in (date, datetime):  # named as the classes they stand for (pickle finds a class by its name)
        cls.__module__, cls.__qualname__ = "datetime", cls.__name__
    fakes["datetime.date"], fakes["datetime.datetime"] = date, datetime
    fakes["builtins.__build_class__"] = _real_bases({date: REAL.date, datetime: REAL.datetime})


def _real_bases(real: dict[type, type]) -> Callable[..., Any]:
    """``builtins.__build_class__`` while patched: a class statement naming our ``date``/``datetime`` as a base
    (a module first imported during a run) subclasses the real class instead, in every thread.

    Why: our classes have their own metaclass, so ``class ConstrainedDate(date, metaclass=M)`` (pydantic v1,
    imported lazily by langchain_core) would raise "metaclass conflict"; and a subclass of ours would outlive the
    run with a ``__new__`` that makes plain dates.  Defined outside a run it subclasses the real one too.
    """

    def __build_class__(func: Callable[..., Any], name: str, *bases: Any, **kwargs: Any) -> Any:
        if any(base is ours for base in bases for ours in real):  # (by identity: a base need not be hashable)
            bases = tuple(next((real[ours] for ours in real if base is ours), base) for base in bases)
        return saved["builtins.__build_class__"](func, name, *bases, **kwargs)

    return __build_class__


def _pickled_by_name(fake: type) -> Callable[[Any], tuple[Any, ...]]:
    """A copyreg reducer: a real date or datetime pickled while ``datetime.datetime`` (or ``.date``) names ``fake``.

    pickle saves a class by its name and checks the name gives that very class back; while patched the name
    gives ours, so a real datetime would not pickle at all, in any thread ("not the same object as
    datetime.datetime").  freezegun registers the same kind of reducer.  Unpickled while patched, ``fake``
    makes a real datetime; unpickled later or elsewhere, the name is the real class again.
    """

    def reduce(value: Any) -> tuple[Any, ...]:
        return fake, value.__reduce_ex__(4)[1]

    return reduce


_make_datetime_types()
REAL_DATETIME_MODULE = ModuleType("datetime", _dt.__doc__)  # the datetime module as it is outside runs
REAL_DATETIME_MODULE.__dict__.update({k: v for k, v in vars(_dt).items() if k not in ("__name__", "__doc__")})
REDUCERS = ((REAL.datetime, _pickled_by_name(fakes["datetime.datetime"])),
            (REAL.date, _pickled_by_name(fakes["datetime.date"])))
