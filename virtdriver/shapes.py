"""Every shape of ``connection_info`` a block-storage service or nova hands over, one meaning.

:func:`normalize` is the one place that reads the shapes (the render path, the driver and the CLI
all call it; protocol modules only ever see ``data``):

- the legacy ``os-initialize_connection`` form: ``{"driver_volume_type", "data": {...}}``;
- nova's reshaped attachment (the same, with ``data`` also carrying ``driver_volume_type`` and
  nova's ``serial`` and ``multiattach`` beside it);
- the attachments API's flat ``connection_info``: the driver's keys and ``driver_volume_type``
  side by side, no ``data`` level (Cinder's ``POST /v3/attachments`` returns this);
- the whole attachment record, ``{"attachment": {..., "attach_mode", "connection_info"}}`` or its
  inner object: the attach mode is the record's ``attach_mode`` (Cinder's ``access_mode`` is
  always ``rw``, the read-only intent lives only there); an explicit ``ro`` narrows a record's
  ``rw`` (read-only wins), an explicit ``rw`` against a record's ``ro`` is refused.

The result is always the legacy form, with ``serial`` defaulting to the volume id when absent
(Cinder sends none; nova sets it to the volume id; nova's adapters pass nova's own, even null).
See docs/cinder.md for what each key Cinder sends means here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from virtdriver.errors import InvalidAttachMode, InvalidConnectionInfo, show

_SERIAL = re.compile(r"[A-Za-z0-9_.+\- ]{1,255}")  # what render accepts as a disk serial


def normalize(document: object, attach_mode: str | None = None) -> tuple[dict[str, Any], str]:
    """``(connection_info in the legacy form, attach mode)`` for any accepted shape.

    ``attach_mode`` is the caller's explicit mode (``None``: not given). From an attachment
    record the mode is the record's ``attach_mode``; an explicit one that differs is an
    :class:`~virtdriver.errors.InvalidAttachMode`, except an explicit ``ro``, which wins.
    Otherwise the explicit mode, else ``rw``.
    The input is never changed; nested values are shared with it (callers copy).
    """
    if type(document) is not dict and not isinstance(document, Mapping):  # dict: no ABC check
        raise InvalidConnectionInfo("connection_info", "is not a JSON object")
    record_mode, where = None, "connection_info"
    if "attachment" in document:
        document, where = document["attachment"], "attachment"
        if not isinstance(document, Mapping):
            raise InvalidConnectionInfo(where, "is not a JSON object")
    if "connection_info" in document:
        record_mode = document.get("attach_mode")
        if record_mode not in ("ro", "rw", None):
            raise InvalidConnectionInfo(f"{where}.attach_mode",
                                        f"{show(record_mode)} is not 'ro' or 'rw'")
        extra = {k: document[k] for k in ("multiattach", "serial") if k in document}
        document, where = document["connection_info"], f"{where}.connection_info"
        if not isinstance(document, Mapping):
            raise InvalidConnectionInfo(where, "is missing or not a JSON object")
        document = {**extra, **document}
    info = _legacy(document, where)
    mode = _mode(attach_mode, record_mode, where)
    if "serial" not in info:  # a caller's explicit null (nova's adapters) stays
        vid = info["data"].get("volume_id")
        if isinstance(vid, str) and _SERIAL.fullmatch(vid):
            info["serial"] = vid
    return info, mode


def _legacy(document: Mapping[str, Any], where: str) -> dict[str, Any]:
    data = document.get("data")
    if type(data) is dict or isinstance(data, Mapping):
        return dict(document)
    if ("data" in document or "driver_volume_type" not in document
            or not set(document) - {"driver_volume_type", "serial", "multiattach"}):
        raise InvalidConnectionInfo(f"{where}.data", "is missing or not a JSON object")
    # the attachments API's flat form: everything but nova's two keys is the driver's data
    info: dict[str, Any] = {k: document[k] for k in ("driver_volume_type", "serial",
                                                     "multiattach") if k in document}
    info["data"] = {k: v for k, v in document.items() if k not in ("serial", "multiattach")}
    return info


def _mode(explicit: object, record: object, where: str) -> str:
    if explicit is not None and explicit not in ("ro", "rw"):
        raise InvalidAttachMode(f"attach_mode: {show(explicit)} is not an attach mode "
                                "(use 'ro' or 'rw')")
    if record is None:
        return explicit or "rw"
    if explicit == "ro":
        return "ro"  # read-only wins: narrowing the record's rw is always safe
    if explicit is not None and explicit != record:
        raise InvalidAttachMode(f"attach_mode: {show(explicit)} contradicts the attachment's own "
                                f"{where.rsplit('.', 1)[0]}.attach_mode {show(record)}")
    return record  # type: ignore[return-value]
