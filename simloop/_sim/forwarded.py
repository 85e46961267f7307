"""`Forwarded`: an attribute of the Sim that one of its pieces keeps, read and set there."""

from __future__ import annotations

from typing import Any, Generic, Self, TypeVar, overload

T = TypeVar("T")


class Forwarded(Generic[T]):
    """``sim.<name>`` is ``sim.<piece>.<attr>``: one value, so the Sim and the piece that uses it never disagree."""

    def __init__(self, piece: str, attr: str = "") -> None:
        self.piece, self.attr = piece, attr

    def __set_name__(self, owner: type, name: str) -> None:
        self.attr = self.attr or name

    @overload
    def __get__(self, obj: None, owner: type) -> Self: ...
    @overload
    def __get__(self, obj: object, owner: type) -> T: ...
    def __get__(self, obj: object | None, owner: type) -> Self | T:
        if obj is None:
            return self
        value: T = getattr(getattr(obj, self.piece), self.attr)
        return value

    def __set__(self, obj: Any, value: T) -> None:
        setattr(getattr(obj, self.piece), self.attr, value)
