"""lxml's ``etree``, imported when first used.

Rendering writes its XML itself (:mod:`virtdriver.config.model`) and never needs lxml, whose
import costs about 8 ms of a command's start; reading XML does. The modules of this package
import ``etree`` from here: to type checkers it is lxml's module, at run time this stand-in,
which imports lxml on its first attribute and keeps each attribute it handed out as its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any


class _Etree:
    def __getattr__(self, name: str) -> Any:
        from lxml import etree

        value = getattr(etree, name)
        setattr(self, name, value)  # found directly from now on, without this method
        return value


if TYPE_CHECKING:
    from lxml import etree as etree
else:
    etree = _Etree()
