"""``compute_driver = virtdriver.nova.LibvirtDriver``: the name nova's loader imports."""

from virtdriver.nova import LibvirtDriver

__all__ = ["LibvirtDriver"]
