"""virtdriver's place in nova's driver namespace.

nova 34 loads ``compute_driver = NAME`` from ``nova.conf`` as ``nova.virt.NAME`` and nothing else
(``nova.virt.driver.load_compute_driver``). virtdriver's wheel therefore installs this small
package into nova's ``nova/virt/`` directory, so that the documented line
``compute_driver = virtdriver.nova.LibvirtDriver`` resolves to
``nova.virt.virtdriver.nova.LibvirtDriver``, which is :class:`virtdriver.nova.LibvirtDriver`.

Nothing else lives here: the driver itself is ``virtdriver.nova``.
"""
