"""virtdriver's dataclasses, made without compiling code at import.

A dataclass generates the source of its ``__init__``, ``__eq__``, ``__repr__`` and, when frozen,
``__hash__``, ``__setattr__`` and ``__delattr__``, and compiles each when its class is made: every
process start pays for it, for every class, the command line's included (it was half of what
importing virtdriver's model and host layer cost; 0.15-0.25 ms for an element with many fields).

A class made with :func:`value_type` is a dataclass (``dataclasses.fields``, ``replace`` and
``asdict`` work on it). Its equality, hash and repr are shared by all of them (:class:`Value`,
:class:`Frozen`), computed from the fields a dataclass's would read; its ``__init__`` is the one a
dataclass would have, compiled when the class is first instantiated, so that a command compiles
only the constructors of what it makes.

Every dataclass of virtdriver is made so, except the slotted ones of the protocol drivers'
contract (``volume/base.py``), where slots refuse a misspelt attribute a plugin would set.

Supported: fields with or without a default or a default factory, ``compare=False``,
``repr=False``, ``__post_init__``. Not supported: ``init=False`` and ``kw_only`` fields (refused
when the class is made), ``InitVar``.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")
_NOT_GIVEN = object()  # stands for an argument left out whose default is a factory


class Value:
    """Equality and repr as a dataclass's, for classes made with :func:`value_type`. Mutable:
    unhashable, as a dataclass with ``eq``."""

    __slots__ = ()
    _compared: ClassVar[Callable[[Any], tuple[Any, ...]]]
    _shown: ClassVar[tuple[str, ...]]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return bool(self._compared(self) == self._compared(other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._shown)
        return f"{type(self).__qualname__}({shown})"


class Frozen(Value):
    """A :class:`Value` whose fields cannot be assigned or deleted once made, and which hashes
    what it compares: a frozen dataclass."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self._compared(self))

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def value_type(cls: type[T]) -> type[T]:
    """``cls``, a :class:`Value` (mutable) or :class:`Frozen` subclass, made a dataclass with
    the behaviour of ``@dataclasses.dataclass`` (``frozen=True`` for a :class:`Frozen`)."""
    if not issubclass(cls, Value):
        raise TypeError(f"{cls.__qualname__} must derive from valuetypes.Value or "
                        "valuetypes.Frozen")
    defines_init = "__init__" in cls.__dict__
    undocumented = not cls.__doc__
    if undocumented:  # else the dataclass documents it from inspect.signature (milliseconds)
        cls.__doc__ = cls.__name__
    made = dataclasses.dataclass(init=False, eq=False, repr=False)(cls)
    every = dataclasses.fields(made)
    if undocumented:  # what the dataclass would have written: its signature
        made.__doc__ = f"{cls.__name__}({', '.join(f.name for f in every)})"
    defaulted = False
    for f in every:
        if not f.init or f.kw_only:
            raise TypeError(f"{cls.__qualname__}.{f.name}: init=False and kw_only fields are "
                            "not supported")
        has_default = (f.default is not dataclasses.MISSING
                       or f.default_factory is not dataclasses.MISSING)
        if defaulted and not has_default:
            raise TypeError(f"{cls.__qualname__}.{f.name}: a field without a default follows "
                            "one with a default")
        defaulted = defaulted or has_default
    if not defines_init:
        setattr(made, "__init__", _first_init(made))
    setattr(made, "_compared", staticmethod(_tuple_of([f.name for f in every if f.compare])))
    setattr(made, "_shown", tuple(f.name for f in every if f.repr))
    return made


def _first_init(cls: type) -> Callable[..., None]:
    """The ``__init__`` of ``cls`` until its first instance: it compiles the class's own, which
    then replaces it on ``cls`` (on ``cls`` itself: a subclass that writes its own constructor
    and calls this one keeps its own)."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init = _compile_init(cls)
        setattr(cls, "__init__", init)
        init(self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _tuple_of(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple of these attributes, as a dataclass compares and hashes them."""
    if len(names) > 1:
        return operator.attrgetter(*names)  # type: ignore[return-value]
    if names:
        name = names[0]
        return lambda value: (getattr(value, name),)
    return lambda _: ()


def _compile_init(cls: type) -> Callable[..., None]:
    """The ``__init__`` a dataclass would have: every field a parameter in field order, its
    default or a fresh value of its factory when left out, then ``__post_init__``."""
    frozen = issubclass(cls, Frozen)
    env: dict[str, Any] = {"_set": object.__setattr__, "_NOT_GIVEN": _NOT_GIVEN}
    params, body = [], []
    for i, f in enumerate(dataclasses.fields(cls)):
        value = f.name
        if f.default is not dataclasses.MISSING:
            env[f"_default_{i}"] = f.default
            params.append(f"{f.name}=_default_{i}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_factory_{i}"] = f.default_factory
            params.append(f"{f.name}=_NOT_GIVEN")
            value = f"_factory_{i}() if {f.name} is _NOT_GIVEN else {f.name}"
        else:
            params.append(f.name)
        body.append(f"_set(self, {f.name!r}, {value})" if frozen else f"self.{f.name} = {value}")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    source = (f"def __init__(self, {', '.join(params)}):\n"
              + "".join(f"    {line}\n" for line in body or ["pass"]))
    made: dict[str, Any] = {}
    exec(compile(source, f"<{cls.__qualname__}.__init__>", "exec"), env, made)  # noqa: S102
    init: Callable[..., None] = made["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    return init
