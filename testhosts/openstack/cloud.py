"""What the small OpenStack needs inside its services, made idempotently (run by
scripts/test-openstack.sh with the control plane's venv Python):

  cloud.py identity    projects, users, roles, services and endpoints in keystone
  cloud.py resources   flavors, the OS-less test image, the volume types; prints their ids
  cloud.py compute-record NOVA_CONF   nova-compute's service record and local node identity

Everything it needs comes from the environment (the URLs and passwords the script set).
"""

from __future__ import annotations

import os
import sys
import time
import uuid

IMAGE_NAME = "vd-osless"
FLAVORS = {"vd.tiny": (128, 1), "vd.small": (192, 2)}  # name: (MiB of RAM, GB of disk)
MULTIATTACH_TYPE = "vd-multiattach"
DEFAULT_TYPE = "vd-rbd"


def env(name: str) -> str:
    return os.environ[name]


def admin():  # -> openstack.connection.Connection
    import openstack

    return openstack.connect(
        auth_url=env("OS_AUTH_URL"), username="admin", password=env("ADMIN_PW"),
        project_name="admin", user_domain_name="Default", project_domain_name="Default",
        region_name=env("OS_REGION_NAME"), identity_api_version="3")


def identity() -> None:
    conn = admin()
    ident = conn.identity
    default = ident.find_domain("default")
    roles = {r.name: r for r in ident.roles()}
    for name in ("member", "reader", "service", "admin"):
        if name not in roles:
            roles[name] = ident.create_role(name=name)

    def project(name: str):
        return ident.find_project(name, domain_id=default.id) or ident.create_project(
            name=name, domain_id=default.id)

    def user(name: str, password: str, proj, role_names: tuple[str, ...]) -> None:
        u = ident.find_user(name, domain_id=default.id)
        if u is None:
            u = ident.create_user(name=name, password=password, domain_id=default.id,
                                  default_project_id=proj.id)
        else:
            ident.update_user(u, password=password)
        for r in role_names:
            ident.assign_project_role_to_user(proj, u, roles[r])

    service = project("service")
    for name in ("nova", "placement", "glance", "cinder", "neutron"):
        user(name, env("SERVICE_PW"), service, ("admin", "service"))
    user("demo", env("DEMO_PW"), project("demo"), ("member", "reader"))
    user("alt_demo", env("ALT_PW"), project("alt_demo"), ("member", "reader"))
    user("admin", env("ADMIN_PW"), project("admin"), ("admin",))

    # type, name, URL; both block-storage types point at Cinder's v3 endpoint
    catalog = [
        ("compute", "nova", env("VD_OS_NOVA_URL")),
        ("placement", "placement", env("VD_OS_PLACEMENT_URL")),
        ("image", "glance", env("VD_OS_GLANCE_URL")),
        ("network", "neutron", env("VD_OS_NEUTRON_URL")),
        ("volumev3", "cinderv3", env("VD_OS_CINDER_URL")),
        ("block-storage", "cinder", env("VD_OS_CINDER_URL")),
    ]
    services = {s.type: s for s in ident.services()}
    endpoints = list(ident.endpoints())
    for stype, name, url in catalog:
        svc = services.get(stype) or ident.create_service(type=stype, name=name, is_enabled=True)
        for interface in ("public", "internal", "admin"):
            have = [e for e in endpoints if e.service_id == svc.id and e.interface == interface]
            if have and have[0].url == url:
                continue
            for e in have:
                ident.delete_endpoint(e)
            ident.create_endpoint(service_id=svc.id, interface=interface, url=url,
                                  region_id=env("OS_REGION_NAME"))


def resources() -> None:
    conn = admin()
    ids = {}
    for name, (ram, disk) in FLAVORS.items():
        flavor = conn.compute.find_flavor(name)
        if flavor is None:
            flavor = conn.compute.create_flavor(name=name, ram=ram, vcpus=1, disk=disk,
                                                is_public=True)
        ids[name] = flavor.id
    image = conn.image.find_image(IMAGE_NAME)
    if image is not None and image.status != "active":
        conn.image.delete_image(image)
        image = None
    if image is None:
        # an OS-less guest: zeros, no boot sector; SeaBIOS finds nothing to boot and waits.
        # SCSI, because such a guest never answers a virtio-blk unplug request; powered off at
        # once, because it never answers ACPI either (nova waits 60 s a resize or stop).
        image = conn.image.create_image(
            name=IMAGE_NAME, disk_format="raw", container_format="bare", visibility="public",
            data=b"\0" * (1024 * 1024), allow_duplicates=True, hw_disk_bus="scsi",
            hw_scsi_model="virtio-scsi", os_shutdown_timeout=0)
    bs = conn.block_storage
    types = {t.name: t for t in bs.types()}
    for name, multiattach in ((DEFAULT_TYPE, False), (MULTIATTACH_TYPE, True)):
        if name in types:
            continue
        specs = {"volume_backend_name": "ceph"}
        if multiattach:
            specs["multiattach"] = "<is> True"
        bs.create_type(name=name, extra_specs=specs)
    print(f"VD_OS_IMAGE_ID={image.id}")
    print(f"VD_OS_IMAGE_NAME={IMAGE_NAME}")
    print(f"VD_OS_FLAVOR_ID={ids['vd.tiny']}")
    print(f"VD_OS_FLAVOR_ALT_ID={ids['vd.small']}")
    print(f"VD_OS_MULTIATTACH_VOLUME_TYPE={MULTIATTACH_TYPE}")
    print(f"VD_OS_VOLUME_TYPE={DEFAULT_TYPE}")


def compute_record(nova_conf: str) -> None:
    """nova-compute refuses to start as a new service while libvirt has any guest (other
    engineers' guests, here): ComputeManager._sanity_check_new_host. A service record of the
    current version and a local node identity written beforehand make it an existing service,
    which only checks that its node identity file is there."""
    from nova import config, context, exception, objects
    from nova.virt import node

    config.parse_args(["nova-compute", "--config-file", nova_conf])
    objects.register_all()
    ctx = context.get_admin_context()
    cell = next(c for c in objects.CellMappingList.get_all(ctx) if c.name == "cell1")
    host = config.CONF.host
    with context.target_cell(ctx, cell) as cctx:
        try:
            objects.Service.get_by_args(cctx, host, "nova-compute")
        except exception.NotFound:
            objects.Service(cctx, host=host, binary="nova-compute", topic="compute",
                            report_count=0).create()
    if node.read_local_node_uuid() is None:
        node.write_local_node_uuid(str(uuid.uuid4()))


def main() -> None:
    what = sys.argv[1]
    for attempt in range(3):  # a service just started may still refuse its first requests
        try:
            if what == "identity":
                identity()
            elif what == "resources":
                resources()
            elif what == "compute-record":
                compute_record(sys.argv[2])
            else:
                sys.exit(f"unknown command {what}")
            return
        except Exception:
            if attempt == 2:
                raise
            time.sleep(2)


if __name__ == "__main__":
    main()
