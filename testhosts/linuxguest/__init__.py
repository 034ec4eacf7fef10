"""A small Linux guest for tests: Debian's kernel and busybox in an initramfs, booted by libvirt.

* :mod:`.build`: kernel and initramfs from Debian packages (``apt-get download`` +
  ``dpkg-deb -x``), cached under ``/var/tmp/virtdriver-linuxguest/<key of the inputs>``;
* :mod:`.initramfs`: the cpio writer and module dependencies read from the modules themselves;
* :mod:`.guest`: the domain (direct kernel boot, TCG, virtio-scsi for hot-plug) and
  :meth:`LinuxGuest.run`, a shell command in the guest over a virtio-serial port;
* ``init.sh``: the guest's PID 1.
"""

from testhosts.linuxguest.build import build
from testhosts.linuxguest.guest import GuestCommandError, LinuxGuest, LinuxGuests, Result

__all__ = ["GuestCommandError", "LinuxGuest", "LinuxGuests", "Result", "build"]
