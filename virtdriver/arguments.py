"""Types of the public entry points' arguments, checked before anything happens.

Every public call (``build_disk``, the ``LibvirtVolumeDriver`` methods, ``HostOptions``, the XML
readers, the CLI's ``main``) answers an argument of the wrong type -- a list where a string is
expected, a string where a list of guests is, a number where a flag is -- with an
:class:`~virtdriver.errors.InputError` whose one-line message starts with the argument's name,
never with Python's own ``TypeError``. What the value must be beyond its type is checked where
the value is used (policy, render, identity). No imports beyond the errors: this is on the
render path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from virtdriver.errors import InputError, InvalidConnectionInfo, InvalidRequest, show

Error = type[InputError]


def _refuse(error: Error, field: str, value: object, what: str) -> InputError:
    if issubclass(error, InvalidConnectionInfo):
        return error(field, f"{show(value)} is not {what}")
    return error(f"{field}: {show(value)} is not {what}")


def text(value: object, field: str, error: Error = InvalidRequest, *,
         optional: bool = False) -> Any:
    """A string (or ``None`` when ``optional``)."""
    if (value is None and optional) or isinstance(value, str):
        return value
    raise _refuse(error, field, value, "a string")


def flag(value: object, field: str, error: Error = InvalidRequest) -> bool:
    """``True`` or ``False``: never a truth value read from something else."""
    if isinstance(value, bool):
        return value
    raise _refuse(error, field, value, "true or false")


def whole(value: object, field: str, error: Error = InvalidRequest, *, minimum: int = 0,
          optional: bool = False) -> Any:
    """An ``int`` (not a ``bool``) of at least ``minimum``."""
    if value is None and optional:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    raise _refuse(error, field, value, f"a whole number of at least {minimum}")


def mapping(value: object, field: str) -> Mapping[str, Any]:
    """A JSON object (``connection_info``)."""
    if isinstance(value, Mapping):
        return value
    raise InvalidConnectionInfo(field, f"{show(value)} is not a JSON object")


def sequence(value: object, field: str, item: Callable[[object, str], Any],
             error: Error = InvalidRequest) -> list[Any]:
    """A list or tuple (not a string, which would be read one character at a time), each item
    checked by ``item(value, f"{field}[i]")``."""
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Sequence):
        raise _refuse(error, field, value, "a list")
    return [item(v, f"{field}[{i}]") for i, v in enumerate(value)]


def texts(value: object, field: str, error: Error = InvalidRequest) -> list[str]:
    """A list of strings."""
    return sequence(value, field, lambda v, where: text(v, where, error), error)


def mappings(value: object, field: str) -> list[Mapping[str, Any]]:
    """A list of JSON objects (``connection_info`` documents)."""
    return sequence(value, field, mapping, InvalidConnectionInfo)


def path(value: object, field: str, error: Error = InvalidRequest, *,
         optional: bool = False) -> Any:
    """A file-system path: a string or an ``os.PathLike`` of one."""
    if value is None and optional:
        return None
    if isinstance(value, os.PathLike):
        value_text = os.fspath(value)
        if isinstance(value_text, str):
            return value
    elif isinstance(value, str):
        return value
    raise _refuse(error, field, value, "a path")


def function(value: object, field: str, *, optional: bool = False) -> Any:
    """Something to call (a progress callback)."""
    if (value is None and optional) or callable(value):
        return value
    raise _refuse(InvalidRequest, field, value, "callable")


def instance_of(value: object, cls: type, field: str, what: str, *,
                optional: bool = False) -> Any:
    if (value is None and optional) or isinstance(value, cls):
        return value
    raise _refuse(InvalidRequest, field, value, what)
