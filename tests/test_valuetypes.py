"""virtdriver's value types behave as the dataclasses they replace, and cost nothing until used.

Each value type is checked against a twin declared with ``@dataclasses.dataclass``: construction,
defaults, equality, hash, repr, immutability, ``replace`` and ``asdict`` must agree.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

from typing import ClassVar

import pytest

from virtdriver import valuetypes
from virtdriver.valuetypes import Frozen, Value, field, value_type


def _pair(frozen: bool, slots: bool = False):
    """The same declaration twice: a value type and a standard dataclass."""
    base = Frozen if frozen else Value

    def body(ns: dict, declare) -> None:
        ns["__annotations__"] = {"name": "str", "size": "int", "tags": "list[str]",
                                 "note": "str | None", "KIND": "ClassVar[str]"}
        ns["size"] = 1
        ns["tags"] = declare(default_factory=list)
        ns["note"] = declare(default=None, compare=False, repr=False, metadata={"m": 1})
        ns["KIND"] = "sample"

    ours = value_type(slots=slots)(type("Sample", (base,), _namespace(body, field)))
    theirs = dataclasses.dataclass(frozen=frozen, slots=slots)(
        type("Sample", (), _namespace(body, dataclasses.field)))
    return ours, theirs


def _namespace(fill, declare) -> dict:
    ns: dict = {"__module__": __name__, "__qualname__": "Sample", "__doc__": "A sample.",
                "ClassVar": ClassVar}
    fill(ns, declare)
    return ns


@pytest.mark.parametrize("slots", [False, True])
@pytest.mark.parametrize("frozen", [True, False])
def test_a_value_type_behaves_as_its_dataclass(frozen: bool, slots: bool) -> None:
    ours, theirs = _pair(frozen, slots)
    calls = [(("a",), {}), (("a", 2), {}), (("a",), {"size": 3, "tags": ["x"], "note": "n"}),
             ((), {"name": "b", "note": "other"})]
    for args, kwargs in calls:
        a, b = ours(*args, **kwargs), theirs(*args, **kwargs)
        assert repr(a) == repr(b)
        assert dataclasses.asdict(a) == dataclasses.asdict(b) == valuetypes.asdict(a)
        assert dataclasses.astuple(a) == dataclasses.astuple(b)
    # equality: by value, same class only, compare=False fields left out
    assert ours("a", note="x") == ours("a", note="y") and ours("a") != ours("b")
    assert ours("a") != theirs("a") and ours("a") != "a"
    assert ours("a").__eq__("a") is NotImplemented
    # a fresh list from the factory for every instance
    assert ours("a").tags is not ours("a").tags
    # this module's functions, and the dataclasses module's (given what they read on demand)
    assert valuetypes.replace(ours("a", 2), size=5) == ours("a", 5)
    assert dataclasses.replace(ours("a", 2), size=5) == ours("a", 5)
    declared = _described(dataclasses.fields(theirs), dataclasses.MISSING)
    assert _described(valuetypes.fields(ours), valuetypes.MISSING) == declared
    assert _described(dataclasses.fields(ours("a")), dataclasses.MISSING) == declared
    assert valuetypes.asdict(ours("a", tags=["t"])) == {"name": "a", "size": 1, "tags": ["t"],
                                                         "note": None}
    assert dataclasses.is_dataclass(ours) and not dataclasses.is_dataclass(base_of(ours))
    assert ours.KIND == "sample" and "KIND" not in [f.name for f in valuetypes.fields(ours)]
    # slots: no attribute beside the fields, on the value type as on the dataclass
    if slots:
        for value in (ours("a"), theirs("a")):
            with pytest.raises((AttributeError, TypeError)):
                value.colour = 1
            assert not hasattr(value, "__dict__")
    # the same refusals as the dataclass's constructor
    for args, kwargs in [((), {}), (("a",), {"colour": 1}), (("a", 1, [], None, 5), {}),
                         (("a",), {"name": "b"})]:
        with pytest.raises(TypeError):
            theirs(*args, **kwargs)
        with pytest.raises(TypeError):
            ours(*args, **kwargs)


def _described(fields, missing) -> list[tuple]:
    return [(f.name, "-" if f.default is missing else f.default,
             "-" if f.default_factory is missing else f.default_factory, f.compare, f.repr,
             dict(f.metadata)) for f in fields]


def base_of(cls: type) -> type:
    return Frozen if issubclass(cls, Frozen) else Value


def test_a_frozen_value_type_hashes_and_refuses_changes_as_a_frozen_dataclass() -> None:
    ours, theirs = _pair(True)
    a, b = ours("a", tags=("t",)), theirs("a", tags=("t",))
    assert hash(a) == hash(b) == hash(ours("a", tags=("t",), note="not compared"))
    assert {a, ours("a", tags=("t",))} == {a}
    for value in (a, b):
        for change in (lambda v: setattr(v, "name", "b"), lambda v: delattr(v, "name"),
                       lambda v: setattr(v, "new", 1)):
            with pytest.raises(dataclasses.FrozenInstanceError):
                change(value)


def test_asdict_copies_nested_values_as_the_dataclasses_module_does() -> None:
    from collections import namedtuple

    Pair = namedtuple("Pair", "a b")

    @value_type
    class Inner(Frozen):
        """Inner."""

        n: int
        tags: tuple = ()

    @value_type
    class Outer(Value):
        """Outer."""

        inner: Inner
        items: list = field(default_factory=list)
        table: dict = field(default_factory=dict)
        pair: object = None
        other: object = None

    @dataclasses.dataclass
    class Standard(dict):  # a dataclass first, as dataclasses.asdict sees it
        n: int = 9

    value = Outer(Inner(1, ("x",)), [Inner(2), [Inner(3)], Standard()],
                  {"k": Inner(4), ("t",): [1]}, Pair(Inner(5), 6), {7, 8})
    ours = valuetypes.asdict(value)
    assert ours == dataclasses.asdict(value) and ours["items"][2] == {"n": 9}
    assert ours["items"][1] == [{"n": 3, "tags": ()}] and type(ours["pair"]) is Pair
    assert ours["other"] == {7, 8} and ours["other"] is not value.other  # deep-copied
    assert ours["items"] is not value.items
    with pytest.raises(TypeError):
        valuetypes.asdict({"not": "a value type"})


def test_a_mutable_value_type_is_unhashable_and_assignable() -> None:
    ours, _ = _pair(False)
    a = ours("a")
    a.size = 7
    assert a == ours("a", 7)
    with pytest.raises(TypeError):
        hash(a)


def test_post_init_runs_after_the_fields_are_set() -> None:
    seen = []

    @value_type
    class Checked(Frozen):
        """Checked."""

        path: str
        size: int = 0

        def __post_init__(self) -> None:
            seen.append((self.path, self.size))
            object.__setattr__(self, "path", self.path.rstrip("/"))

    assert Checked("/a/", size=2).path == "/a" and seen == [("/a/", 2)]


def test_the_constructor_is_compiled_when_first_used_and_each_class_has_its_own() -> None:
    @value_type
    class Base(Frozen):
        """Base."""

        a: int

    @value_type
    class Derived(Base):
        """Derived."""

        b: int = 2

    first = Base.__dict__["__init__"]
    assert first.__code__ is Derived.__dict__["__init__"].__code__  # nothing compiled yet
    assert Base(1).a == 1
    assert Base.__dict__["__init__"] is not first  # compiled on first use, then kept
    assert Base.__init__.__qualname__.endswith("Base.__init__")
    d = Derived(1)  # not the base's constructor: the derived class's own fields
    assert (d.a, d.b) == (1, 2) and Derived(1, 3) != d and Derived(1) == d


def test_a_plain_subclass_with_its_own_constructor_keeps_it() -> None:
    @value_type
    class Base(Frozen):
        """Base."""

        a: int

    class Parsed(Base):
        def __init__(self, text: str) -> None:
            super().__init__(int(text))

    assert Parsed("4").a == 4  # the base's constructor compiled for the base
    assert Parsed("5").a == 5 and Base(6).a == 6  # and the subclass's own still used
    assert "__init__" in Parsed.__dict__ and Parsed.__init__ is not Base.__init__


def test_a_class_that_writes_its_own_constructor_keeps_it() -> None:
    @value_type
    class Own(Frozen):
        """Own."""

        a: int

        def __init__(self, text: str) -> None:
            object.__setattr__(self, "a", int(text))

    assert Own("4").a == 4 and Own("4") == Own("04")


def test_declarations_a_value_type_cannot_honour_are_refused() -> None:
    with pytest.raises(TypeError, match="valuetypes.field, not dataclasses.field"):
        @value_type
        class Theirs(Frozen):
            a: int = dataclasses.field(default=0)

    with pytest.raises(TypeError, match="kw_only"):
        @value_type
        class KwOnly(Frozen):
            a: int = field(kw_only=True)  # type: ignore[call-arg]

    with pytest.raises(TypeError, match="init"):
        @value_type
        class Hidden(Frozen):
            a: int = field(init=False, default=0)  # type: ignore[call-arg]

    with pytest.raises(TypeError, match="InitVar and KW_ONLY"):
        @value_type
        class Later(Frozen):
            a: dataclasses.InitVar[int]

    with pytest.raises(TypeError, match="no type annotation"):
        @value_type
        class Unannotated(Frozen):
            a = field(default=0)

    for declare in (dataclasses.dataclass, value_type):  # the same refusal as a dataclass's
        with pytest.raises(ValueError, match="mutable default"):
            declare(type("Mutable", (Frozen,) if declare is value_type else (),
                         {"__annotations__": {"a": "list"}, "a": []}))

    with pytest.raises(ValueError, match="both default and default_factory"):
        field(default=0, default_factory=int)

    with pytest.raises(TypeError, match="follows"):
        @value_type
        class Order(Frozen):
            a: int = 0
            b: int  # type: ignore[misc]

    with pytest.raises(TypeError, match="valuetypes.Value"):
        @value_type
        class Plain:
            a: int


def test_an_undocumented_value_type_is_documented_as_a_dataclass_would_be() -> None:
    @value_type
    class Bare(Frozen):
        a: int
        b: str = ""

    assert Bare.__doc__ == "Bare(a, b)"


def test_importing_the_host_layer_compiles_no_constructor() -> None:
    # What `virtdriver list` imports: making its classes compiles no code (a dataclass would
    # compile two to six functions per class); value types compile their constructor when used.
    probe = """
import builtins, json, sys
compiled = []
real = builtins.compile
def counting(source, filename, *args, **kwargs):
    compiled.append(str(filename))
    return real(source, filename, *args, **kwargs)
builtins.compile = counting
real_exec = builtins.exec
def counting_exec(code, *args, **kwargs):
    if isinstance(code, str):
        compiled.append("exec of source")
    return real_exec(code, *args, **kwargs)
builtins.exec = counting_exec
import virtdriver.cli, virtdriver.driver
print(json.dumps({"compiled": compiled, "dataclasses": "dataclasses" in sys.modules}))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    result = json.loads(done.stdout)
    compiled = result["compiled"]
    assert not result["dataclasses"]  # nor imported the dataclasses module (and its inspect)
    assert "exec of source" not in compiled  # no function generated as a dataclass does
    # compiled at import: the constructors of the few values made then (the model's
    # converters and field declarations), nothing per class
    constructors = [name for name in compiled if name.endswith(".__init__>")]
    assert constructors == ["<Converter.__init__>", "<_Spec.__init__>"]


def test_what_list_prints_is_made_without_the_dataclasses_module() -> None:
    # `virtdriver list` prints each attachment's to_api(): asdict must not import dataclasses
    # (nor build the dataclasses module's view of the class, which compiles four functions).
    probe = """
import json, sys
from virtdriver.attachment import Attachment
from virtdriver.valuetypes import fields
a = Attachment(*[f"v{i}" for i in range(len(fields(Attachment)))])
print(json.dumps({"api": a.to_api(), "dataclasses": "dataclasses" in sys.modules}))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    result = json.loads(done.stdout)
    assert not result["dataclasses"]
    assert result["api"]["volumeId"] == "v3" and len(result["api"]) == 12
