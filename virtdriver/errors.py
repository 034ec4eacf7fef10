"""The exceptions virtdriver raises.

Every error derives from :class:`VirtDriverError`, so a caller can catch one type. Messages are
written for a host operator: they say what was wrong and where, never carry a secret, and never
need a traceback to be understood.
"""

from __future__ import annotations

import reprlib

_REPR = reprlib.Repr()
_REPR.maxstring = 80
_REPR.maxother = 80


def show(value: object) -> str:
    """A short, bounded ``repr`` for messages: never huge, never deeply recursive."""
    try:
        return _REPR.repr(value)
    except ValueError:  # an int beyond the interpreter's int-to-string limit, wherever it sits
        return "<a number too long to show>"


class VirtDriverError(Exception):
    """Base of every error virtdriver raises on purpose.

    Every error belongs to one of four kinds, each with one exit code of the CLI
    (:data:`EXIT_CODES`): bad input (:class:`InputError`), a refusal by the attach policy
    (:class:`PolicyRefusal`), a failure of the host or the hypervisor (:class:`HostError`),
    and a wait that ran out (:class:`OperationTimeout`).
    """

    exit_code: int = 1
    kind: str = "host"


class InputError(VirtDriverError):
    """The request itself is unusable: fix the input (exit 2)."""

    exit_code = 2
    kind = "input"


class PolicyRefusal(VirtDriverError):
    """The request is well-formed but unsafe: the attach policy refuses it (exit 3)."""

    exit_code = 3
    kind = "policy"


class HostError(VirtDriverError):
    """The host, libvirt, QEMU or the storage failed or refused an operation (exit 1)."""

    exit_code = 1
    kind = "host"


class OperationTimeout(VirtDriverError):
    """A bounded wait ran out; nothing was changed by the part that timed out (exit 4)."""

    exit_code = 4
    kind = "timeout"


#: The CLI's exit status for each kind of error (0 is success, 130 an interrupt).
EXIT_CODES: dict[str, int] = {cls.kind: cls.exit_code
                              for cls in (HostError, InputError, PolicyRefusal, OperationTimeout)}


# --- the XML model -------------------------------------------------------------------------------


class ConfigError(InputError):
    """A libvirt XML document could not be read into, or written from, the model."""


class MalformedXML(ConfigError):
    """The text is not well-formed XML."""


class UndeclaredXML(ConfigError):
    """Strict parsing met an element or attribute the model does not declare."""


class InvalidXMLValue(ConfigError):
    """A value cannot be expressed in XML or does not fit its declared type."""


# --- input from the storage service or the caller ------------------------------------------------


class InvalidConnectionInfo(InputError):
    """``connection_info`` is missing a key, has a wrong type or an unusable value.

    ``path`` names the offending key, e.g. ``connection_info.data.qos_specs.read_iops_sec``.
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class InvalidRenderOption(InputError):
    """A render or host option (target device, bus, SCSI unit, label policy, ...) is not usable."""


class InvalidAttachMode(InputError):
    """The attach mode is not ``ro`` or ``rw``, or is given where none is allowed."""


class InvalidRequest(InputError):
    """A call's arguments do not make sense together (a guest named twice, no guest, ...)."""


class UnsupportedVolumeType(InputError):
    """No volume driver is registered for ``driver_volume_type``."""

    def __init__(self, volume_type: object, known: list[str]) -> None:
        self.volume_type = volume_type
        self.known = known
        super().__init__(
            f"unsupported driver_volume_type {show(volume_type)}; known types: {', '.join(known)}"
        )


# --- refusals by the attach policy ---------------------------------------------------------------


class UnsafeAttachment(PolicyRefusal):
    """The policy refuses a combination that would risk data or access (see the message)."""


class MultiattachNotSupported(UnsafeAttachment):
    """Sharing was asked of a volume, host or disk format that cannot share safely."""


# --- the hypervisor layer ------------------------------------------------------------------------


class HypervisorError(HostError):
    """libvirt or QEMU refused or failed an operation; ``libvirt_message`` holds its words."""

    def __init__(self, message: str, libvirt_message: str | None = None) -> None:
        self.libvirt_message = libvirt_message
        super().__init__(message if not libvirt_message else f"{message}: {libvirt_message}")


class InstanceNotFound(HypervisorError):
    """No domain has the given name or UUID."""


class HostConnectFailed(HypervisorError):
    """os-brick could not connect (or disconnect) the host side of a volume."""


class WrongDevice(HostConnectFailed):
    """The device os-brick connected is not the volume connection_info names."""


class OrphansNotReleased(HostConnectFailed):
    """The orphan sweep went through every orphan, and some release failed; ``outcome`` holds
    each orphan's description with ``None`` (released) or why it was kept."""

    def __init__(self, message: str, outcome: list[tuple[str, str | None]]) -> None:
        super().__init__(message)
        self.outcome = outcome


class StateError(HypervisorError):
    """virtdriver's state directory (locks, host-connection records) is unusable or damaged."""


class DamagedRecord(StateError):
    """A volume's host-connection record cannot be read, so virtdriver cannot tell what to
    release for that volume; the message gives the operator's one next step."""

    NEXT_STEP = ("inspect the file, disconnect the volume's host device by hand if it is still "
                 "connected, then remove the file")

    def __init__(self, path: object, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"the host-connection record {path} is unreadable or damaged "
                         f"({reason}), so virtdriver cannot tell what to release: "
                         f"{self.NEXT_STEP}")


class AttachFailed(HypervisorError):
    """Attaching failed; everything done on the way was undone."""


class AttachRolledBack(AttachFailed):
    """A guest took the disk, and it was removed again because the attach failed elsewhere
    (only reported per guest, to an attach-many's progress; the call raises the failure)."""


class InvalidAttachRequest(InvalidRequest, AttachFailed):
    """An attach request that names no guest, or one guest twice (bad input, exit 2)."""


class VolumeInUse(PolicyRefusal, AttachFailed):
    """The volume (or its data) is attached elsewhere on this host in a way that forbids
    sharing."""


class SharedWriteRefused(VolumeInUse):
    """A second writer on a filesystem that is not built for shared block access."""


class DetachFailed(HypervisorError):
    """The guest or libvirt refused the detach."""


class GuestLeft(DetachFailed):
    """The guest left this host by live migration while the operation waited: nothing was
    detached (its devices went along to the other host)."""


class DetachTimeout(OperationTimeout, DetachFailed):
    """libvirt did not confirm the device removal in time."""


class LockTimeout(OperationTimeout, HostError):
    """Another operation held a volume's lock for longer than the wait allowed."""


class NotAttached(HypervisorError):
    """The volume is not attached to that guest."""


class SwapFailed(HypervisorError):
    """The block copy to the new volume failed; the guest still uses the old one."""


class SwapTimeout(OperationTimeout, SwapFailed):
    """The block copy did not get ready in time; it was cancelled, the old volume kept."""


class SwapRefused(PolicyRefusal, SwapFailed):
    """The policy refuses the swap (a shared source with other writers, the same volume, ...)."""


class MigrationFailed(HypervisorError):
    """A live migration step failed on one of the two hosts."""


class MigrationRefused(PolicyRefusal, MigrationFailed):
    """Moving a guest (or its volume) to another host would be unsafe."""


class ExtendRefused(PolicyRefusal):
    """The new size is smaller than the volume, or the storage has not grown to it."""


class ExtendIncomplete(HypervisorError):
    """The volume grew, but some guest's QEMU still shows the old size; the message names each
    such guest, why, and the command that brings it up to date."""


class CinderError(HostError):
    """The block-storage service (Cinder) refused a call or did not answer (exit 1);
    ``status`` is Cinder's HTTP status (``None`` when it did not answer)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
