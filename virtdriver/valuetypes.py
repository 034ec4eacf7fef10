"""virtdriver's dataclasses, made without the ``dataclasses`` module and without compiling code.

A dataclass generates the source of its ``__init__``, ``__eq__``, ``__repr__`` and, when frozen,
``__hash__``, ``__setattr__`` and ``__delattr__``, and compiles each when its class is made; and
the ``dataclasses`` module itself imports ``inspect`` (with ``ast``, ``dis`` and ``tokenize``).
Every process start paid for both, the command line's included: 10 ms of a 0.1 s ``virtdriver
list``.

A class made with :func:`value_type` behaves as the dataclass it declares. Its equality, hash and
repr are shared by all of them (:class:`Value`, :class:`Frozen`), computed from the fields a
dataclass's would read; its ``__init__`` is the one a dataclass would have, compiled when the class
is first instantiated, so that a command compiles only the constructors of what it makes. Fields
are declared as a dataclass's, with this module's :func:`field`, and read with its
:func:`fields`, :func:`replace` and :func:`asdict`. The ``dataclasses`` module's own functions
(``fields``, ``replace``, ``asdict``, ``is_dataclass``) work too: they are given what they read
when they first ask for it.

Every dataclass of virtdriver is made so. The protocol drivers' contract (``volume/base.py``)
makes its classes with ``slots=True``, so that an attribute a plugin misspells is refused.

Supported: fields with or without a default or a default factory, ``compare=False``,
``repr=False``, ``metadata``, ``__post_init__``, inherited fields, ``slots=True``. Refused when
the class is made: ``dataclasses.field`` (use this module's), ``InitVar`` and ``KW_ONLY``, a
mutable default, a field without a default after one with.
"""

from __future__ import annotations

import operator
import typing
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")
_NOT_GIVEN = object()  # stands for an argument left out whose default is a factory
_NO_METADATA: Mapping[str, Any] = MappingProxyType({})


class _Missing:
    """No default (``dataclasses.MISSING``'s counterpart)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Field:
    """One declared field of a value type, as ``dataclasses.Field`` describes one."""

    __slots__ = ("name", "type", "default", "default_factory", "compare", "repr", "metadata")

    def __init__(self, default: Any, default_factory: Any, compare: bool, repr: bool,
                 metadata: Mapping[str, Any] | None) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = ""
        self.type: Any = None
        self.default = default
        self.default_factory = default_factory
        self.compare = compare
        self.repr = repr
        self.metadata = _NO_METADATA if metadata is None else MappingProxyType(dict(metadata))

    def named(self, name: str, annotation: Any) -> Field:
        made = Field(self.default, self.default_factory, self.compare, self.repr, self.metadata)
        made.name, made.type = name, annotation
        return made

    def __repr__(self) -> str:
        return (f"Field(name={self.name!r}, default={self.default!r}, "
                f"default_factory={self.default_factory!r}, compare={self.compare}, "
                f"repr={self.repr})")


def field(*, default: Any = MISSING, default_factory: Callable[[], Any] | Any = MISSING,
          compare: bool = True, repr: bool = True,
          metadata: Mapping[str, Any] | None = None) -> Any:
    """A field's declaration, as ``dataclasses.field`` makes one (without ``init``, ``hash`` and
    ``kw_only``)."""
    return Field(default, default_factory, compare, repr, metadata)


def fields(class_or_instance: Any) -> tuple[Field, ...]:
    """The fields of a value type or of one of its instances, in order."""
    cls = class_or_instance if isinstance(class_or_instance, type) else type(class_or_instance)
    every: tuple[Field, ...] | None = getattr(cls, "__value_fields__", None)
    if every is None:
        raise TypeError(f"{cls.__qualname__} is not a value type")
    return every


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of ``obj`` with ``changes``, made by its constructor (``dataclasses.replace``)."""
    for f in fields(obj):
        if f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return obj.__class__(**changes)


def asdict(obj: Any) -> dict[str, Any]:
    """``obj``, a value type, as a dict of its fields, as ``dataclasses.asdict`` makes it, in
    its order: value types and dataclasses within made dicts, named tuples, lists, tuples and
    dicts copied the same way, anything else deep-copied."""
    fields(obj)  # a TypeError for anything but a value type
    return _copied(obj)  # type: ignore[no-any-return]


_IMMUTABLE = (str, int, float, bool, bytes, type(None))  # what deepcopy returns as it is


def _copied(obj: Any) -> Any:
    kind = type(obj)
    if kind in _IMMUTABLE:
        return obj
    every = getattr(kind, "__value_fields__", None)
    if every is not None:
        return {f.name: _copied(getattr(obj, f.name)) for f in every}
    if hasattr(kind, "__dataclass_fields__"):  # a standard dataclass within
        import dataclasses

        return dataclasses.asdict(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return kind(*[_copied(v) for v in obj])
    if isinstance(obj, (list, tuple)):
        return kind(_copied(v) for v in obj)
    if isinstance(obj, dict):
        return kind((_copied(k), _copied(v)) for k, v in obj.items())
    import copy

    return copy.deepcopy(obj)


class _DataclassView:
    """What the ``dataclasses`` module reads of a dataclass (``__dataclass_fields__``,
    ``__dataclass_params__``), made for a value type when first asked for: a standard dataclass
    with the same declarations, whose answers the value type then keeps."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type) -> Any:
        if getattr(owner, "__value_fields__", None) is None:
            raise AttributeError(self.name)  # a base, not a value type
        import dataclasses

        namespace: dict[str, Any] = {"__annotations__": {}, "__module__": owner.__module__,
                                     "__qualname__": owner.__qualname__}
        for f in fields(owner):
            namespace["__annotations__"][f.name] = f.type
            declared = {"default": f.default, "default_factory": f.default_factory}
            namespace[f.name] = dataclasses.field(
                compare=f.compare, repr=f.repr, metadata=f.metadata,
                **{k: v for k, v in declared.items() if v is not MISSING})
        twin = dataclasses.dataclass(eq=False, frozen=issubclass(owner, Frozen))(
            type(owner.__name__, (), namespace))
        for name in ("__dataclass_fields__", "__dataclass_params__"):
            type.__setattr__(owner, name, twin.__dict__[name])
        return owner.__dict__[self.name]


class Value:
    """Equality and repr as a dataclass's, for classes made with :func:`value_type`. Mutable:
    unhashable, as a dataclass with ``eq``."""

    __slots__ = ()
    __value_fields__: ClassVar[tuple[Field, ...]]
    _compared: ClassVar[Callable[[Any], tuple[Any, ...]]]
    _shown: ClassVar[tuple[str, ...]]
    __dataclass_fields__ = _DataclassView()
    __dataclass_params__ = _DataclassView()

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
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r}")


@typing.overload
def value_type(cls: type[T], /) -> type[T]: ...


@typing.overload
def value_type(*, slots: bool = False) -> Callable[[type[T]], type[T]]: ...


def value_type(cls: type[T] | None = None, /, *, slots: bool = False) -> Any:
    """``cls``, a :class:`Value` (mutable) or :class:`Frozen` subclass, made a value type with
    the behaviour of ``@dataclasses.dataclass`` (``frozen=True`` for a :class:`Frozen`).
    ``@value_type(slots=True)``: as ``slots=True``, a new class whose instances hold their
    fields in slots and refuse any other attribute."""
    if cls is None:
        return lambda made: _make(made, slots)
    return _make(cls, slots)


def _make(cls: type[T], slots: bool) -> type[T]:
    if not issubclass(cls, Value):
        raise TypeError(f"{cls.__qualname__} must derive from valuetypes.Value or "
                        "valuetypes.Frozen")
    every = _inherited(cls)
    own = cls.__dict__.get("__annotations__", {})
    for name, value in list(cls.__dict__.items()):
        if _is_dataclasses_field(value):
            raise TypeError(f"{cls.__qualname__}.{name}: declare a value type's fields with "
                            "virtdriver.valuetypes.field, not dataclasses.field")
        if isinstance(value, Field) and name not in own:
            raise TypeError(f"{cls.__qualname__}.{name} is a field but has no type annotation")
    for name, annotation in own.items():
        if _is_classvar(annotation):
            continue
        if _is_unsupported(annotation):
            raise TypeError(f"{cls.__qualname__}.{name}: InitVar and KW_ONLY are not supported")
        declared = cls.__dict__.get(name, MISSING)
        made = (declared if isinstance(declared, Field)
                else Field(declared, MISSING, True, True, None)).named(name, annotation)
        if made.default is not MISSING and type(made.default).__hash__ is None:
            raise ValueError(f"{cls.__qualname__}.{name}: mutable default "
                             f"{type(made.default).__name__} is not allowed: use "
                             "default_factory")
        if made.default is not MISSING:
            setattr(cls, name, made.default)
        elif name in cls.__dict__:
            delattr(cls, name)
        every[name] = made  # a field declared again keeps its place, as in a dataclass
    ordered = tuple(every.values())
    _check_order(cls, ordered)
    if slots:
        cls = _slotted(cls, [name for name in own if name in every])
    setattr(cls, "__value_fields__", ordered)
    names = tuple(f.name for f in ordered)
    if "__match_args__" not in cls.__dict__:
        setattr(cls, "__match_args__", names)
    if not cls.__doc__:  # what a dataclass would write: its signature
        cls.__doc__ = f"{cls.__name__}({', '.join(names)})"
    if "__init__" not in cls.__dict__:
        setattr(cls, "__init__", _first_init(cls))
    setattr(cls, "_compared", staticmethod(_tuple_of([f.name for f in ordered if f.compare])))
    setattr(cls, "_shown", tuple(f.name for f in ordered if f.repr))
    return cls


def _slotted(cls: type[T], names: list[str]) -> type[T]:
    """``cls`` made again with a slot for each of its own fields, as a slotted dataclass is (its
    defaults are its constructor's: a slot and a class attribute cannot share a name)."""
    namespace = {k: v for k, v in cls.__dict__.items()
                 if k not in names and k not in ("__dict__", "__weakref__")}
    namespace["__slots__"] = tuple(names)
    return type(cls)(cls.__name__, cls.__bases__, namespace)  # type: ignore[no-any-return]


def _inherited(cls: type) -> dict[str, Field]:
    """The fields ``cls`` inherits, the furthest base's first, as a dataclass collects them."""
    every: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        declared = base.__dict__.get("__value_fields__")
        if declared is not None:
            every.update((f.name, f) for f in declared)
        elif isinstance(base.__dict__.get("__dataclass_fields__"), dict):
            raise TypeError(f"{cls.__qualname__}: a value type cannot derive from the standard "
                            f"dataclass {base.__qualname__}")
    return every


def _is_dataclasses_field(value: Any) -> bool:
    kind = type(value)
    return kind.__name__ == "Field" and kind.__module__ == "dataclasses"


def _annotation_head(annotation: Any) -> str:
    """The name an annotation starts with: ``ClassVar`` for ``"typing.ClassVar[int]"``."""
    if isinstance(annotation, str):
        return annotation.split("[", 1)[0].strip().rpartition(".")[2]
    if annotation is typing.ClassVar or typing.get_origin(annotation) is typing.ClassVar:
        return "ClassVar"
    kind = type(annotation)
    return kind.__name__ if kind.__module__ == "dataclasses" else ""


def _is_classvar(annotation: Any) -> bool:
    return _annotation_head(annotation) == "ClassVar"


def _is_unsupported(annotation: Any) -> bool:
    return _annotation_head(annotation) in ("InitVar", "KW_ONLY", "_KW_ONLY_TYPE")


def _check_order(cls: type, every: tuple[Field, ...]) -> None:
    defaulted = False
    for f in every:
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        if defaulted and not has_default:
            raise TypeError(f"{cls.__qualname__}.{f.name}: a field without a default follows "
                            "one with a default")
        defaulted = defaulted or has_default


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
    for i, f in enumerate(fields(cls)):
        value = f.name
        if f.default is not MISSING:
            env[f"_default_{i}"] = f.default
            params.append(f"{f.name}=_default_{i}")
        elif f.default_factory is not MISSING:
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
