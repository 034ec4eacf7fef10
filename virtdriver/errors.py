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
    """Base of every error virtdriver raises on purpose."""


# --- the XML model -------------------------------------------------------------------------------


class ConfigError(VirtDriverError):
    """A libvirt XML document could not be read into, or written from, the model."""


class MalformedXML(ConfigError):
    """The text is not well-formed XML."""


class UndeclaredXML(ConfigError):
    """Strict parsing met an element or attribute the model does not declare."""


class InvalidXMLValue(ConfigError):
    """A value cannot be expressed in XML or does not fit its declared type."""


# --- input from the storage service or the caller ------------------------------------------------


class InvalidConnectionInfo(VirtDriverError):
    """``connection_info`` is missing a key, has a wrong type or an unusable value.

    ``path`` names the offending key, e.g. ``connection_info.data.qos_specs.read_iops_sec``.
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class InvalidRenderOption(VirtDriverError):
    """A render option (target device, bus, SCSI unit, ...) is not usable."""


class InvalidAttachMode(VirtDriverError):
    """The attach mode is not ``ro`` or ``rw``, or is given where none is allowed."""


class UnsupportedVolumeType(VirtDriverError):
    """No volume driver is registered for ``driver_volume_type``."""

    def __init__(self, volume_type: object, known: list[str]) -> None:
        self.volume_type = volume_type
        self.known = known
        super().__init__(
            f"unsupported driver_volume_type {show(volume_type)}; known types: {', '.join(known)}"
        )


class UnsafeAttachment(VirtDriverError):
    """The policy refuses a combination that would risk data or access (see the message)."""


class MultiattachNotSupported(UnsafeAttachment):
    """Sharing was asked of a volume, host or disk format that cannot share safely."""


# --- the hypervisor layer ------------------------------------------------------------------------


class HypervisorError(VirtDriverError):
    """libvirt or QEMU refused or failed an operation; ``libvirt_message`` holds its words."""

    def __init__(self, message: str, libvirt_message: str | None = None) -> None:
        self.libvirt_message = libvirt_message
        super().__init__(message if not libvirt_message else f"{message}: {libvirt_message}")


class InstanceNotFound(HypervisorError):
    """No domain has the given name or UUID."""


class HostConnectFailed(HypervisorError):
    """os-brick could not connect (or disconnect) the host side of a volume."""


class AttachFailed(HypervisorError):
    """Attaching failed; everything done on the way was undone."""


class VolumeInUse(AttachFailed):
    """The volume is attached elsewhere on this host and is not multiattach."""


class DetachFailed(HypervisorError):
    """The guest or libvirt refused the detach."""


class DetachTimeout(DetachFailed):
    """libvirt did not confirm the device removal in time."""


class NotAttached(HypervisorError):
    """The volume is not attached to that guest."""


class SwapFailed(HypervisorError):
    """The block copy to the new volume failed; the guest still uses the old one."""


class ExtendRefused(VirtDriverError):
    """The new size is smaller than the volume, or the storage has not grown to it."""
