"""Reading mountinfo: which mount a path lives on, and whether mounts below it propagate."""

from __future__ import annotations

import os

from virtdriver.hypervisor import mounts

MOUNTINFO = """\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
42 27 254:0 /var/b /var/b rw,relatime shared:1 - ext4 /dev/vda rw
43 42 0:50 / /var/b/a\\040b rw,relatime master:1 - fuse.glusterfs 127.0.0.1:/v rw
44 27 0:51 / /var/c rw - tmpfs t rw
45 44 0:52 / /var/c rw shared:7 - tmpfs t rw
"""


def test_mountinfo_is_read_with_escapes_and_propagation_tags() -> None:
    entries = mounts.parse_mountinfo(MOUNTINFO)
    assert [e.mount_point for e in entries] == ["/", "/var/b", "/var/b/a b", "/var/c", "/var/c"]
    assert [e.shared for e in entries] == [False, True, False, False, True]


def test_a_path_lives_on_the_longest_topmost_mount_above_it() -> None:
    entries = mounts.parse_mountinfo(MOUNTINFO)
    on = {p: mounts.containing_mount(p, entries) for p in
          ("/var/b/x", "/var/b/a b/f", "/var/bb", "/var/c/d", "/")}
    assert {p: e.mount_point for p, e in on.items()} == {
        "/var/b/x": "/var/b", "/var/b/a b/f": "/var/b/a b", "/var/bb": "/", "/var/c/d": "/var/c",
        "/": "/"}
    assert on["/var/c/d"].shared  # the stacked mount on top decides


def test_this_process_finds_its_own_root() -> None:
    root = mounts.containing_mount("/", mounts.read_mountinfo())
    assert root is not None and root.mount_point == "/"
    assert mounts.qemu_sees(os.getpid(), "/") is True
    assert mounts.fix_command("/srv/m") == ("mount --bind /srv/m /srv/m && "
                                            "mount --make-shared /srv/m")


def test_mount_points_are_bytes_and_any_name_is_read() -> None:
    """Issue 56 item 7: a name that is not UTF-8, or holds a carriage return or a vertical tab
    (the kernel escapes only a space, a tab, a newline and a backslash), is kept as the path."""
    raw = (b"27 1 254:0 / / rw - ext4 /dev/vda rw\n"
           b"50 27 0:60 / /srv/a\xff\xfe\\040b\\012c rw shared:3 - tmpfs t\\134x rw\n"
           b"51 27 0:61 / /srv/r\rv\x0b rw - tmpfs /dev/loop7 rw\n")
    entries = mounts.parse_mountinfo(raw)
    assert [e.mount_point for e in entries] == ["/", os.fsdecode(b"/srv/a\xff\xfe b\nc"),
                                                "/srv/r\rv\x0b"]
    assert [e.source for e in entries] == ["/dev/vda", "t\\x", "/dev/loop7"]
    assert [e.shared for e in entries] == [False, True, False]
    assert os.fsencode(entries[1].mount_point) == b"/srv/a\xff\xfe b\nc"  # the path itself
    assert mounts.parse_mountinfo(raw.decode("utf-8", "surrogateescape")) == entries
    assert [mounts.shown_path(e.mount_point) for e in entries] == [
        "/", "/srv/a\\xff\\xfe b\\nc", "/srv/r\\rv\\x0b"]
