"""Test hosts: machines the tests boot, never installed on a compute host.

* :mod:`.linuxguest`: a small Linux guest (Debian's kernel, busybox, sg3-utils in an initramfs)
  with a command channel, to check from inside a guest what virtdriver promises.
"""
