"""How a declared field's Python value becomes XML text and back: the converters the model's
declarations name (:func:`virtdriver.config.model.attr`, ``text_child``), used by the reader to
parse a value and by the writer to format one."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Converter:
    """How a field's Python value becomes XML text and back."""

    name: str
    parse: Callable[[str], Any]
    format: Callable[[Any], str]
    needs_escape: bool


def _parse_int(text: str) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", text.strip()):
        raise ValueError(f"{text!r} is not an integer")
    return int(text)


def _format_int(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not an integer")
    return str(value)


def _format_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value


STR = Converter("string", str, _format_str, True)
INT = Converter("integer", _parse_int, _format_int, False)
