"""The hypervisor side: libvirt connection, events, host connections, locks, targets."""
