"""Inter-process locks (``flock`` on a file): per volume, per data, per guest.

- A **volume lock** serializes everything done to one volume id on this host.
- A **data lock** serializes everything done to one piece of data (a device, a file, a network
  volume; :mod:`virtdriver.hypervisor.dataid`) whatever volume id names it, so two attaches of
  different ids that point at one device cannot both pass the sharing check.
- A **guest lock** serializes target choice and attach per guest.

Every lock file also says when its last holder let go (:attr:`HeldLocks.settled_at`): every change
that holder made under the lock was done by then, so a read of the host begun later sees them. An
attach whose data lock is the one every operation on that data takes may therefore use a read
begun before it took its locks (but after it was asked: :mod:`virtdriver.driver.attach`), and a
guest's disks read before its lock stay current while the guest settled before that read began.
A holder that dies leaves "held" instead: its successor then counts the moment it took the lock.
A file nobody has held yet is empty: nothing was done under it. (Lock files are never removed: a
removed one would stop excluding, and would lose its time with it.) The times are
``CLOCK_MONOTONIC``, one clock for the whole host, unless a process runs in a time namespace of its
own (Linux 5.6): the file names the namespace, and a stamp from another counts as unknown.

Why not fasteners or oslo.concurrency: their inter-process locks are POSIX record locks
(``lockf``), which belong to the process, so two threads of one process (attach-many attaches
guests in parallel) would not exclude each other; ``flock`` belongs to the open file description.
The kernel drops a lock when its holder dies, so a crash never leaves a volume locked. Waits are
bounded: past ``timeout`` a :class:`~virtdriver.errors.LockTimeout` names the holder, which each
holder writes into its lock file. A wait that lasts longer than ``notice_after``
seconds (:data:`NOTICE_AFTER`, at most half the timeout) is said once, as a warning of the
``virtdriver.locks`` logger that the CLI shows: what it waits for, who holds it, for how long it
will wait.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from virtdriver.errors import LockTimeout, StateError
from virtdriver.policy.identity import encode_volume_id

DEFAULT_TIMEOUT = 300.0  # seconds; a host connect (an iSCSI scan) can take minutes
NOTICE_AFTER = 2.0  # seconds of waiting for a lock before the wait is said
LOG = logging.getLogger("virtdriver.locks")
MAX_NAME = 160  # characters of an encoded id kept in a file name; longer ids are hashed


def file_token(volume_id: str) -> str:
    """A file-name-safe, collision-free name for a volume id (see
    :mod:`~virtdriver.policy.identity`)."""
    encoded = encode_volume_id(volume_id)
    if len(encoded) <= MAX_NAME:
        return encoded
    import hashlib

    return "h-" + hashlib.sha256(volume_id.encode("utf-8")).hexdigest()


def _open(path: str) -> int:
    try:
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:  # the first lock in this state directory
            os.makedirs(os.path.dirname(path), exist_ok=True)
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StateError(f"cannot use the lock file {path}: "
                         f"{exc.strerror or exc} (check the state directory)") from None


def _holder(fd: int) -> str:
    """The holder's note (see :func:`_take_over`), or nothing."""
    try:
        text = os.pread(fd, NOTE_WIDTH, STAMP_WIDTH).decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return text if text.startswith("pid ") else ""


def _acquire(fd: int, path: str, what: str, timeout: float,
             notice_after: float = NOTICE_AFTER, kind: int = fcntl.LOCK_EX) -> None:
    """Take the lock, waiting at most ``timeout`` seconds (``inf`` or ``None``: without bound);
    a wait longer than ``notice_after`` seconds (or half the timeout) is said once. ``kind``:
    ``LOCK_EX``, or ``LOCK_SH`` for a lock many may hold at once."""
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    except OSError as exc:
        raise StateError(f"cannot lock {path}: {exc.strerror or exc}") from None
    bounded = timeout is not None and timeout != float("inf")
    start = time.monotonic()
    notice = start + (min(notice_after, timeout / 2) if bounded else notice_after)
    deadline = start + max(0.0, timeout) if bounded else float("inf")
    waiter = _KernelWait(fd, kind) if deadline > start else None
    try:
        if waiter is not None and not waiter.wait(notice - start):
            LOG.warning("waiting for %s: %s holds its lock; waiting up to %s", what,
                        _holder(fd) or "another operation (its pid is not recorded)",
                        f"{timeout:g} s (--lock-timeout)" if bounded else "without limit")
            waiter.wait(deadline - time.monotonic())
    finally:
        taken = waiter is not None and waiter.stop()  # one taken after the bound is given back
    if waiter is not None and waiter.error is not None:
        raise StateError(f"cannot lock {path}: {waiter.error.strerror or waiter.error}")
    if not taken:
        holder = _holder(fd) or "holder unknown"
        raise LockTimeout(f"{what} is busy: another operation ({holder}) has held its "
                          f"lock for more than {timeout:g} s; try again later (or wait "
                          "longer: --lock-timeout)")


class _KernelWait:
    """A blocking ``flock`` in a thread of its own: flock has no timed wait, this has one.

    The thread locks a duplicate of the descriptor: the lock belongs to the open file, which
    both share, so the caller holds it once the thread has it. It is woken the moment the
    holder lets go, with no polling. If the caller stops waiting first, the thread gives
    back the lock it takes later.
    """

    def __init__(self, fd: int, kind: int) -> None:
        self._fd, self._kind = os.dup(fd), kind
        self._state = threading.Lock()
        self._given_up = False
        self._done = threading.Event()
        self.error: OSError | None = None
        threading.Thread(target=self._take, name="virtdriver-lock-wait", daemon=True).start()

    def _take(self) -> None:
        try:
            fcntl.flock(self._fd, self._kind)
        except OSError as exc:
            self.error = exc
        with self._state:
            self._done.set()
            give_back = self._given_up and self.error is None
        try:
            if give_back:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)  # the caller's descriptor keeps a lock it took

    def wait(self, seconds: float) -> bool:
        """Whether the lock was taken (or failed) within ``seconds``."""
        return self._done.wait(None if seconds == float("inf") else max(0.0, seconds))

    def stop(self) -> bool:
        """Stop waiting: ``True`` when the lock is held, else it is given back once taken."""
        with self._state:
            if not self._done.is_set():
                self._given_up = True
                return False
        return self.error is None


STAMP_WIDTH = 64  # the file's first bytes: "held", or "released <monotonic ns> <time namespace>"
NOTE_WIDTH = 200  # bytes of a holder's note after the stamp, padded: one pwrite replaces both


@functools.cache
def _time_namespace() -> str:
    """This process's time namespace (``0`` on kernels without them: one clock for all)."""
    try:
        return str(os.stat("/proc/self/ns/time").st_ino)
    except OSError:
        return "0"


def _take_over(fd: int, path: str, operation: str) -> int:
    """Note the new holder (and "held") in the lock file; returns when the previous holder let
    go (:attr:`HeldLocks.settled_at`): 0 if none ever held it, now if the file does not say.

    The stamp comes first: an older virtdriver's note (bytes 0-200) or a guest's attach
    generation (bytes 0-20) written over it makes it unreadable, which counts as now.
    """
    now = time.monotonic_ns()
    try:
        fields = os.pread(fd, STAMP_WIDTH, 0).split()
    except OSError:
        fields = [b"unreadable"]
    settled = now if fields else 0  # an empty file: nothing was ever done under it
    if len(fields) == 3 and fields[0] == b"released" and fields[1].isdigit() \
            and fields[2].decode("ascii", "replace") == _time_namespace():
        settled = min(int(fields[1]), now)  # a larger one is from before a reboot
    note = f"pid {os.getpid()}, {operation}, since {time.strftime('%H:%M:%S')}".encode()
    text = b"held".ljust(STAMP_WIDTH) + note[:NOTE_WIDTH].ljust(NOTE_WIDTH)
    try:
        written = os.pwrite(fd, text, 0)
    except OSError as exc:
        written, problem = 0, exc.strerror or str(exc)
    else:
        problem = "a short write"
    if written != len(text):  # a later holder would trust the time of the release before
        raise StateError(f"cannot write the lock file {path}: {problem} (check the state "
                         "directory)")
    return settled


def _let_go(fd: int) -> None:
    """Say in the lock file that its holder is done (every change made), then release it."""
    try:
        stamp = f"released {time.monotonic_ns()} {_time_namespace()}".encode()
        with contextlib.suppress(OSError):  # "held" stays: the next holder counts its own time
            os.pwrite(fd, stamp.ljust(STAMP_WIDTH), 0)
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


def _volume_file(lock_dir: Path, volume_id: str) -> tuple[str, str]:
    """A volume's lock file and how a wait for it is described."""
    return f"{lock_dir}/volume-{file_token(volume_id)}.lock", f"volume {volume_id}"


def _data_file(lock_dir: Path, token: str, described: str) -> tuple[str, str]:
    """A piece of data's lock file and how a wait for it is described."""
    return f"{lock_dir}/data-{token}.lock", f"the data of {described}"


def volume_lock(lock_dir: Path, volume_id: str, *, operation: str = "an operation",
                timeout: float = DEFAULT_TIMEOUT,
                notice_after: float = NOTICE_AFTER) -> HeldLocks:
    """Hold the exclusive lock of ``volume_id`` (threads and processes alike)."""
    return HeldLocks([_volume_file(lock_dir, volume_id)], operation, timeout, notice_after)


def data_lock(lock_dir: Path, token: str, described: str, *, operation: str = "an operation",
              timeout: float = DEFAULT_TIMEOUT,
              notice_after: float = NOTICE_AFTER) -> HeldLocks:
    """Hold the exclusive lock of one piece of data (``token`` from ``dataid.identity_token``)."""
    return HeldLocks([_data_file(lock_dir, token, described)], operation, timeout, notice_after)


def locks(lock_dir: Path, volumes: list[str], data: list[tuple[str, str]], *, operation: str,
          timeout: float = DEFAULT_TIMEOUT,
          notice_after: float = NOTICE_AFTER) -> HeldLocks:
    """Volume locks, then data locks, each set in sorted order (so two callers never deadlock)."""
    described = dict(sorted(data, reverse=True))  # one lock per token, whoever names it
    wanted = ([_volume_file(lock_dir, vid) for vid in sorted(set(volumes))]
              + [_data_file(lock_dir, token, described[token]) for token in sorted(described)])
    return HeldLocks(wanted, operation, timeout, notice_after)


class HeldLocks(contextlib.AbstractContextManager["HeldLocks"]):
    """Lock files taken in the given order from ``__enter__`` to ``__exit__``, released in the
    reverse order (a class, not a generator: the attach path takes these on every call). The
    single locks (:func:`volume_lock`, :func:`data_lock`) are a list of one."""

    def __init__(self, wanted: list[tuple[str, str]], operation: str, timeout: float,
                 notice_after: float) -> None:
        self._wanted = wanted
        self._operation, self._timeout, self._notice_after = operation, timeout, notice_after
        self._held: list[int] = []
        self.settled_at = 0
        """``time.monotonic_ns()`` by which every change made under these locks was done."""
        self.taken_at = 0
        """``time.monotonic_ns()`` once all were taken (or this holder last changed something)."""

    def __enter__(self) -> HeldLocks:
        try:
            for path, what in self._wanted:
                fd = _open(path)
                try:
                    _acquire(fd, path, what, self._timeout, self._notice_after)
                except BaseException:
                    os.close(fd)  # never held: its holder's "held" stays as it is
                    raise
                self._held.append(fd)
                self.settled_at = max(self.settled_at, _take_over(fd, path, self._operation))
        except BaseException:
            self._release()
            raise
        self.taken_at = time.monotonic_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release()

    def changed(self) -> None:
        """Record that the holder changed something: later reads must begin after now."""
        self.settled_at = self.taken_at = time.monotonic_ns()

    def _release(self) -> None:
        while self._held:
            _let_go(self._held.pop())


@contextlib.contextmanager
def connections_lock(lock_dir: Path, *, sweeping: bool, timeout: float = DEFAULT_TIMEOUT
                     ) -> Iterator[None]:
    """Host connections being made and recorded (shared, by every connect) against a sweep of
    unrecorded ones (exclusive): a sweep never takes a connection whose record is on its way."""
    path = str(lock_dir / "host-connections.lock")
    fd = _open(path)
    try:
        _acquire(fd, path, "the host's connections", timeout,
                 kind=fcntl.LOCK_EX if sweeping else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def _guest_lock_path(lock_dir: Path, guest_uuid: str) -> str:
    return f"{lock_dir}/volume-guest-{guest_uuid}.lock"


class GuestLock:
    """A held guest lock: :attr:`settled_at`, when its previous holder let go."""

    def __init__(self, fd: int, path: str, operation: str) -> None:
        self.settled_at = _take_over(fd, path, operation)


@contextlib.contextmanager
def guest_lock(lock_dir: Path, guest_uuid: str, *, timeout: float = DEFAULT_TIMEOUT,
               notice_after: float = NOTICE_AFTER,
               operation: str = "attach") -> Iterator[GuestLock]:
    """Hold the exclusive lock of one guest (target choice and attach are serialized per
    guest); its release says when, so the guest's disks read before then are known stale."""
    path = _guest_lock_path(lock_dir, guest_uuid)
    fd = _open(path)
    try:
        _acquire(fd, path, f"guest {guest_uuid}", timeout, notice_after)
        held = GuestLock(fd, path, operation)
    except BaseException:
        os.close(fd)  # not held, or its "held" mark unwritten: nothing to stamp
        raise
    try:
        yield held
    finally:
        _let_go(fd)


def lock_is_free(lock_dir: Path, volume_id: str) -> bool:
    """True when nobody holds the volume's lock (for checks and audits)."""
    path = _volume_file(lock_dir, volume_id)[0]
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True
