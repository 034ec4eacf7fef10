"""Test hosts: machines the tests boot, never installed on a compute host.

* :mod:`.guests`: OS-less guests (XML, start/remove, KVM with a TCG fallback), the embedded
  driver's roots, a private libvirtd, loop devices, qemu-io and ``query-block`` through the QMP
  monitor, DEVICE_REMOVED events: used by the tests, the benchmarks and the demo;
* :mod:`.linuxguest`: a small Linux guest (Debian's kernel, busybox, sg3-utils in an initramfs)
  with a command channel, to check from inside a guest what virtdriver promises.
"""
