"""Which of Cinder's attachments count as writers on other hosts (#56 item 5), as a table."""

from __future__ import annotations

import pytest

from virtdriver.cinder.flow import named_writers

HERE = "node-1"


def att(att_id: str, host: str | None) -> dict[str, object]:
    """One entry of Cinder's volume view ``attachments`` (``host_name`` for an admin only)."""
    return {"attachment_id": att_id, "host_name": host, "server_id": "s", "volume_id": "v"}


@pytest.mark.parametrize(("host", "mode", "mine", "counted"), [
    ("node-2", "rw", False, True),  # a writer elsewhere
    ("node-2", None, False, True),  # a mode Cinder did not say may write
    ("node-2", "null", False, True),  # Cinder's own spelling of no mode: rw by default
    ("node-2", "ro", False, False),  # a reader elsewhere
    (HERE, "rw", False, False),  # this host's: libvirt shows its guest
    (None, "rw", False, True),  # a host Cinder does not name (not an admin)
    (None, "rw", True, False),  # ... that a guest of this host remembers
    ("node-2", "rw", True, True),  # a named other host counts whatever notes say
])
def test_which_attachments_are_writers_elsewhere(host: str | None, mode: str | None,
                                                 mine: bool, counted: bool) -> None:
    modes = {} if mode is None else {"a1": mode}
    got = named_writers([att("a1", host)], modes, HERE, {"a1"} if mine else set())
    where = host or "a host Cinder does not name"
    assert got == ([f"attachment a1 on {where}"] if counted else [])


def test_several_attachments_keep_their_order() -> None:
    attachments = [att("a1", "node-2"), att("a2", HERE), att("a3", "node-3")]
    assert named_writers(attachments, {"a3": "rw"}, HERE, set()) == [
        "attachment a1 on node-2", "attachment a3 on node-3"]
