"""Which files of a few directories changed since the last look (Linux inotify).

The host read (:mod:`virtdriver.hypervisor.xmlcache`) keeps each domain's XML while libvirt's
saved files of it are unchanged, and the host-connection records keep their arrival notes the
same way. libvirt saves a domain by writing ``<name>.xml.new`` and renaming it over
``<name>.xml`` before the call that changed it returns, and the kernel queues an inotify event
for the rename before ``rename()`` returns. So a file with no event since it was last read holds
what it held then: no timestamps, no reads.

A :class:`DirWatch` answers :meth:`~DirWatch.changes` with the names that changed in each
directory (and whether each was removed or renamed away meanwhile), or ``None`` when it cannot
tell (the kernel's queue overflowed, a directory was removed or moved, the process forked since
the watch was made, an exception such as an interrupt ended the last look halfway): then every
file must be read again. A forked child never reads its parent's queue (they would share it and
steal each other's events): it opens its own.

Its owners make a :class:`LazyWatch`: nothing is watched (nor ctypes imported) until the owner
starts it, when watching starts to pay, and a watch whose directories went is made again once
they are back (a daemon restarted).
"""

from __future__ import annotations

import functools
import os
import struct
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ctypes

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

WATCHED = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
           | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF)
GONE = IN_DELETE | IN_MOVED_FROM
LOST = IN_Q_OVERFLOW | IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name, NUL padded)


class WatchUnavailable(OSError):
    """inotify cannot watch these directories here."""


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    """The C library the interpreter runs with (its own symbols: no ``ctypes.util``, whose
    import alone costs a command-line start ~9 ms, and no ``ldconfig`` run)."""
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()


class DirWatch:
    """The names changed in ``directories`` since the last :meth:`changes` (see the module)."""

    def __init__(self, directories: Iterable[str | os.PathLike[str]]) -> None:
        self.directories = tuple(str(d) for d in directories)
        self._lock = threading.Lock()
        self._fd = -1
        self._pid = -1
        self._by_wd: dict[int, str] = {}
        self._torn = False  # a look began and did not end: its events are lost
        self._open()

    def _open(self) -> None:
        libc = _libc()
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = _errno()
            raise WatchUnavailable(err, f"inotify_init1: {os.strerror(err)}")
        by_wd = {}
        for directory in self.directories:
            wd = libc.inotify_add_watch(fd, os.fsencode(directory), WATCHED)
            if wd < 0:
                err = _errno()
                os.close(fd)
                raise WatchUnavailable(err, f"inotify_add_watch {directory}: {os.strerror(err)}")
            by_wd[wd] = directory
        self._fd, self._pid, self._by_wd, self._torn = fd, os.getpid(), by_wd, False

    def changes(self) -> dict[str, dict[str, bool]] | None:
        """``{directory: {name: removed}}`` for the names changed since the last call (an empty
        dict: nothing changed), ``removed`` true when the name was removed or renamed away at
        some point meanwhile (it may be back); ``None`` when that cannot be told and every file
        must be read again."""
        with self._lock:
            if self._pid != os.getpid():  # forked: the queue is the parent's; open our own
                self._reopen()
                return None
            if self._fd < 0:
                return None
            if self._torn:  # an exception (an interrupt) ended the last look halfway
                self._reopen()
                return None
            self._torn = True
            found: dict[str, dict[str, bool]] = {}
            lost = False
            while True:
                try:
                    buf = os.read(self._fd, 65536)
                except BlockingIOError:
                    break
                offset = 0
                while offset < len(buf):
                    wd, mask, _cookie, size = _EVENT.unpack_from(buf, offset)
                    name = buf[offset + _EVENT.size:offset + _EVENT.size + size].rstrip(b"\0")
                    offset += _EVENT.size + size
                    if mask & LOST:
                        lost = True
                        continue
                    directory = self._by_wd.get(wd)
                    if directory is not None and name:
                        names = found.setdefault(directory, {})
                        key = os.fsdecode(name)
                        names[key] = names.get(key, False) or bool(mask & GONE)
            if lost:  # start a new queue: what changes from now on is in it
                self._reopen()
                return None
            self._torn = False
            return found

    def _reopen(self) -> None:
        self._close()
        try:
            self._open()
        except WatchUnavailable:  # a directory is gone: no answers from now on
            self._fd = -1

    def _close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # in a forked child, its copy only: the parent keeps its queue
        self._fd = -1

    @property
    def usable(self) -> bool:
        """False once the watch cannot answer again (a directory went): make a new one."""
        return self._fd >= 0

    def close(self) -> None:
        with self._lock:
            self._close()

    def __del__(self) -> None:  # a dropped watch gives its inotify instance back (128 per user)
        if self._pid == os.getpid():
            self._close()


class LazyWatch:
    """A :class:`DirWatch` of ``directories`` made when its owner :meth:`starts <start>` it
    and, once started, made again whenever its directories went and are back. Its
    :meth:`changes` cannot tell (``None``) until a watch runs, nor at the first look of a
    new one. Not for threads at once: the owner serializes its looks."""

    def __init__(self, directories: Iterable[str | os.PathLike[str]]) -> None:
        self.directories = tuple(str(d) for d in directories)
        self._watch: DirWatch | None = None
        self._started = False

    @property
    def running(self) -> bool:
        return self._watch is not None

    def start(self) -> bool:
        """Watch from now on (what changed before is not known); whether a watch runs."""
        self._started = True
        if self._watch is None:
            try:
                self._watch = DirWatch(self.directories)
            except WatchUnavailable:
                return False
        return True

    def changes(self) -> dict[str, dict[str, bool]] | None:
        """:meth:`DirWatch.changes`, or ``None`` while no watch runs."""
        watch = self._watch
        if watch is None:
            if self._started:  # its directories went: a new watch, if they are back
                self.start()
            return None
        found = watch.changes()
        if found is None and not watch.usable:
            watch.close()
            self._watch = None
        return found

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
