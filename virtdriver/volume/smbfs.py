"""SMB/CIFS shares: a file on the mounted share (write-back cache unless shared)."""

from virtdriver.volume import probes
from virtdriver.volume.base import NovaBinding
from virtdriver.volume.remotefs import RemoteFsVolumeDriver


class SMBFSVolumeDriver(RemoteFsVolumeDriver):
    volume_type = "smbfs"
    nova = NovaBinding("nova.virt.libvirt.volume.smbfs.LibvirtSMBFSVolumeDriver")
    brick_protocol = None  # mounted by the compute service's own SMB client, not os-brick
    cache = "writeback"
    io = None
    export_style = "unc"

    def host_probe(self) -> tuple[bool, str] | None:
        return probes.kernel_mount(("cifs", "smb3"), "mount.cifs")
