"""Write a tempest.conf for the control plane of scripts/test-openstack.sh.

    gen_conf.py --env FILE --workspace DIR [--driver DRIVER]

FILE holds the output of `scripts/test-openstack.sh env` (`export KEY=VALUE` lines). The keys
give the credentials, the image, the flavors and the multiattach volume type; the rest is asked
of the running cloud, so the file says what the cloud is rather than what we hope: keystone's
catalog (services, region, endpoint types), the roles tempest's dynamic credentials assign,
nova's and Cinder's microversion ranges, Cinder's pools (backends, protocol, vendor) and
services (backup), the image's properties, and nova.conf (`allow_resize_to_same_host`,
`compute_driver`). Writes DIR/etc/tempest.conf and prints one line per fact it used.

Nothing here turns a test off. Options are set to what the cloud has; a test tempest then skips
is skipped by tempest's own check (README.md lists each).

Run it with tempest's venv python: it checks every option it writes against tempest's own
option list (an unknown name would otherwise be ignored silently by oslo.config).
"""

from __future__ import annotations

import argparse
import configparser
import json
import shlex
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

# Services tempest 47 has a [service_available] switch for, by the catalog type that means it.
SERVICE_TYPES = {
    "nova": ("compute",),
    "cinder": ("block-storage", "volumev3"),
    "glance": ("image",),
    "neutron": ("network",),
    "swift": ("object-store",),
    "horizon": ("dashboard",),
}
REQUIRED_SERVICES = ("nova", "cinder", "glance", "neutron")
# Roles tempest's dynamic credentials assign for the selected tests: primary (member),
# project_reader (reader), admin, and the swap tests' service_user (admin + service).
REQUIRED_ROLES = ("admin", "member", "reader", "service")
TIMEOUT = 30


class ConfError(Exception):
    """The cloud cannot serve the tests as configured: the message says what is missing."""


def parse_env(text: str) -> dict[str, str]:
    """`export KEY=VALUE` lines (values shell-quoted) -> dict; other lines are ignored."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        words = shlex.split(line)
        if words and words[0] == "export":
            words = words[1:]
        for word in words:
            key, sep, value = word.partition("=")
            if sep and key.replace("_", "").isalnum():
                env[key] = value
    return env


def need(env: dict[str, str], key: str) -> str:
    value = env.get(key, "")
    if not value:
        raise ConfError(f"`scripts/test-openstack.sh env` printed no {key}")
    return value


class Cloud:
    """A few authenticated REST calls, as the admin user, with the standard library."""

    def __init__(self, env: dict[str, str]):
        self.auth_url = need(env, "OS_AUTH_URL").rstrip("/")
        if not self.auth_url.endswith("/v3"):
            self.auth_url += "/v3"
        self.region = env.get("OS_REGION_NAME") or None
        self.interface = (env.get("OS_INTERFACE") or "public").replace("URL", "")
        body = {"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": need(env, "VD_OS_ADMIN_USERNAME"),
                "password": need(env, "VD_OS_ADMIN_PASSWORD"),
                "domain": {"name": env.get("OS_USER_DOMAIN_NAME") or "Default"}}}},
            "scope": {"project": {
                "name": need(env, "VD_OS_ADMIN_PROJECT_NAME"),
                "domain": {"name": env.get("OS_PROJECT_DOMAIN_NAME") or "Default"}}}}}
        reply, headers = self._call("POST", self.auth_url + "/auth/tokens", body)
        self.token = headers["X-Subject-Token"]
        self.catalog = reply["token"]["catalog"]

    def _call(self, method: str, url: str, body: dict | None = None,
              token: str | None = None, ok_300: bool = False):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("X-Auth-Token", token)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as reply:
                return json.loads(reply.read() or b"null"), reply.headers
        except urllib.error.HTTPError as error:
            if ok_300 and error.code == 300:   # a version list answers 300 Multiple Choices
                return json.loads(error.read()), error.headers
            raise ConfError(f"{method} {url}: HTTP {error.code} "
                            f"{error.read()[:300].decode(errors='replace')}") from None
        except OSError as error:
            raise ConfError(f"{method} {url}: {error}") from None

    def get(self, url: str, ok_300: bool = False):
        return self._call("GET", url, token=self.token, ok_300=ok_300)[0]

    def service_type(self, types: tuple[str, ...]) -> str | None:
        present = {entry["type"] for entry in self.catalog if entry.get("endpoints")}
        return next((t for t in types if t in present), None)

    def endpoint(self, service_type: str) -> tuple[str, str]:
        """(url, region) of the service's endpoint for our interface (and region, if set)."""
        for entry in self.catalog:
            if entry["type"] != service_type:
                continue
            for ep in entry["endpoints"]:
                if ep["interface"] == self.interface and (
                        self.region is None or ep.get("region_id") == self.region):
                    return ep["url"].rstrip("/"), ep.get("region_id") or ""
        raise ConfError(f"no {self.interface} endpoint of {service_type} in keystone's catalog"
                        + (f" (region {self.region})" if self.region else ""))


def microversions(doc: dict) -> tuple[str, str]:
    """(min, max) microversion from a version document ({version: ...} or {versions: [...]})."""
    version = doc.get("version") or max(
        doc.get("versions") or [{}], key=lambda v: v.get("status") == "CURRENT")
    low, high = version.get("min_version"), version.get("version")
    if not low or not high:
        raise ConfError(f"no microversion range in {json.dumps(doc)[:300]}")
    return low, high


def read_conf(path: Path) -> configparser.ConfigParser | None:
    if not path.is_file():
        return None
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read(path)
    return parser


def conf_bool(parser: configparser.ConfigParser | None, section: str, key: str,
              default: bool) -> bool:
    if parser is None or not parser.has_option(section, key):
        return default
    return parser.get(section, key).strip().lower() in ("1", "true", "yes", "on")


def gather(env: dict[str, str], workspace: Path, driver: str | None):
    """Ask the cloud; returns (sections, facts): {section: {key: value}}, printable lines."""
    facts: list[str] = []
    cloud = Cloud(env)
    available = {name: cloud.service_type(types) for name, types in SERVICE_TYPES.items()}
    missing = [name for name in REQUIRED_SERVICES if not available[name]]
    if missing:
        raise ConfError(f"keystone's catalog has no {', '.join(missing)}")
    facts.append("catalog: " + ", ".join(f"{n}={t}" for n, t in available.items() if t))

    identity_url, region = cloud.endpoint("identity")
    compute_url, _ = cloud.endpoint("compute")
    volume_type_name = available["cinder"]
    volume_url, _ = cloud.endpoint(volume_type_name)

    roles = {role["name"] for role in cloud.get(identity_url + "/roles")["roles"]}
    lacking = [role for role in REQUIRED_ROLES if role not in roles]
    if lacking:
        raise ConfError(f"keystone has no role {', '.join(lacking)} (tempest's dynamic "
                        "credentials assign them)")

    nova_min, nova_max = microversions(cloud.get(compute_url, ok_300=True))
    facts.append(f"nova microversions {nova_min}-{nova_max}")
    if tuple(map(int, nova_max.split("."))) < (2, 60):
        raise ConfError(f"nova's maximum microversion {nova_max} is below 2.60 (multiattach)")
    parts = urllib.parse.urlsplit(volume_url)
    prefix = parts.path.split("/v3")[0]
    cinder_root = urllib.parse.urlunsplit((parts.scheme, parts.netloc, prefix + "/v3/", "", ""))
    cinder_min, cinder_max = microversions(cloud.get(cinder_root, ok_300=True))
    facts.append(f"cinder microversions {cinder_min}-{cinder_max}")

    pools = cloud.get(volume_url + "/scheduler-stats/get_pools?detail=True")["pools"]
    backends = sorted({p["capabilities"].get("volume_backend_name") or p["name"].split("#")[-1]
                       for p in pools})
    if not backends:
        raise ConfError("Cinder reports no pools (is cinder-volume up?)")
    protocols = sorted({str(p["capabilities"].get("storage_protocol", "")) for p in pools})
    vendors = sorted({str(p["capabilities"].get("vendor_name", "")) for p in pools})
    services = cloud.get(volume_url + "/os-services")["services"]
    backup = any(s["binary"] == "cinder-backup" and s["state"] == "up"
                 and s["status"] == "enabled" for s in services)
    facts.append(f"cinder backends {backends}, protocol {protocols}, vendor {vendors}, "
                 f"backup service {'up' if backup else 'none'}")

    multiattach_type = need(env, "VD_OS_MULTIATTACH_VOLUME_TYPE")
    types = cloud.get(volume_url + "/types?is_public=None")["volume_types"]
    by_name = {t["name"]: t for t in types}
    spec = (by_name.get(multiattach_type) or {}).get("extra_specs", {}).get("multiattach", "")
    if spec.replace(" ", "").lower() != "<is>true":
        raise ConfError(f"volume type {multiattach_type!r} has no multiattach='<is> True' "
                        f"(types: {sorted(by_name)})")

    image_url, _ = cloud.endpoint("image")
    image_id = need(env, "VD_OS_IMAGE_ID")
    image = cloud.get(f"{image_url}/v2/images/{image_id}")
    facts.append(f"image {image_id}: status {image.get('status')}, "
                 f"hw_disk_bus={image.get('hw_disk_bus')}, "
                 f"hw_scsi_model={image.get('hw_scsi_model')}")
    flavor_ref, flavor_alt = need(env, "VD_OS_FLAVOR_ID"), need(env, "VD_OS_FLAVOR_ALT_ID")
    for flavor_id in (flavor_ref, flavor_alt):
        cloud.get(f"{compute_url}/flavors/{flavor_id}")

    state = Path(env.get("VD_OS_DIR") or "/var/tmp/virtdriver-openstack-state")
    nova_conf = read_conf(state / "etc/nova/nova.conf")
    resize = conf_bool(nova_conf, "DEFAULT", "allow_resize_to_same_host", False)
    running_driver = env.get("VD_OS_COMPUTE_DRIVER") or (
        nova_conf.get("DEFAULT", "compute_driver", fallback="") if nova_conf else "")
    facts.append(f"nova.conf: allow_resize_to_same_host={resize}, "
                 f"compute_driver={running_driver or '?'}")
    if driver and running_driver != driver:
        raise ConfError(f"nova-compute runs compute_driver={running_driver or '?'}, this run "
                        f"wants {driver} (README.md: comparison with nova's own driver)")
    # [enforce_scope]: oslo.policy of this release checks scope always and enforce_new_defaults
    # defaults to True; a service's own conf may turn the new defaults off
    enforce = {}
    for service, conf_file in (("nova", "nova/nova.conf"), ("cinder", "cinder/cinder.conf"),
                               ("glance", "glance/glance-api.conf"),
                               ("neutron", "neutron/neutron.conf"),
                               ("keystone", "keystone/keystone.conf"),
                               ("placement", "placement/placement.conf")):
        conf = read_conf(state / "etc" / conf_file)
        enforce[service] = conf_bool(conf, "oslo_policy", "enforce_new_defaults", True)

    logs = workspace / "logs"
    sections: dict[str, dict[str, object]] = {
        "DEFAULT": {"log_dir": logs, "log_file": "tempest.log", "debug": True,
                    "use_stderr": False},
        "auth": {
            # tempest creates a project and users per test class, removed after it
            "use_dynamic_credentials": True,
            # no network, subnet, router per project: servers are created with networks
            # 'none' (tempest's create_test_server at microversion >= 2.37 without a network)
            "create_isolated_networks": False,
            "admin_username": need(env, "VD_OS_ADMIN_USERNAME"),
            "admin_password": need(env, "VD_OS_ADMIN_PASSWORD"),
            "admin_project_name": need(env, "VD_OS_ADMIN_PROJECT_NAME"),
            "admin_domain_name": env.get("VD_OS_DOMAIN_NAME") or "Default",
            "default_credentials_domain_name": env.get("VD_OS_DOMAIN_NAME") or "Default",
        },
        "identity": {"uri_v3": identity_url, "auth_version": "v3", "region": region,
                     "v3_endpoint_type": cloud.interface, "admin_role": "admin",
                     "default_domain_id": "default"},
        "identity-feature-enabled": {"api_v2": False, "api_v3": True},
        "compute": {
            "catalog_type": "compute", "region": region, "endpoint_type": cloud.interface,
            "image_ref": image_id, "image_ref_alt": env.get("VD_OS_IMAGE_ALT_ID") or image_id,
            "flavor_ref": flavor_ref, "flavor_ref_alt": flavor_alt,
            "min_microversion": nova_min, "max_microversion": nova_max,
            "min_compute_nodes": 1,
            # the host is a loaded 2-core machine; waits, not retries
            "build_timeout": 600,
        },
        "compute-feature-enabled": {
            "volume_multiattach": True,
            # libvirt swaps a volume by block copy (virtdriver's swap included)
            "swap_volume": True,
            "resize": resize,
            "snapshot": True,
        },
        "volume": {
            "catalog_type": volume_type_name, "region": region, "endpoint_type": cloud.interface,
            "min_microversion": cinder_min, "max_microversion": cinder_max,
            "backend_names": ",".join(backends),
            "storage_protocol": protocols[0] if len(protocols) == 1 else "",
            "vendor_name": vendors[0] if len(vendors) == 1 else "",
            "volume_type": env.get("VD_OS_VOLUME_TYPE") or "",
            "volume_type_multiattach": multiattach_type,
            "build_timeout": 600,
        },
        "volume-feature-enabled": {
            "multi_backend": len(backends) > 1,
            "backup": backup,
            "snapshot": True,
            "clone": True,
        },
        "image": {"catalog_type": "image", "region": region, "endpoint_type": cloud.interface},
        "network": {"catalog_type": "network", "region": region,
                    "endpoint_type": cloud.interface, "project_networks_reachable": False,
                    "public_network_id": "", "floating_network_name": ""},
        "placement": {"region": region, "endpoint_type": cloud.interface},
        "validation": {
            # the guests have no OS: nothing answers ping or ssh
            "run_validation": False,
            "connect_method": "fixed",
        },
        "service_available": {name: bool(available[name]) for name in SERVICE_TYPES},
        "enforce_scope": enforce,
        "oslo_concurrency": {"lock_path": workspace / "tempest_lock"},
    }
    return sections, facts


def check_options(sections: dict[str, dict[str, object]]) -> None:
    """Every option we write exists in tempest 47 (a typo would be ignored by oslo.config)."""
    try:
        from tempest import config as tempest_config
    except ImportError:
        raise ConfError("run gen_conf.py with tempest's venv python (venv.sh)") from None
    known = {group.name: {opt.dest for opt in opts} for group, opts in tempest_config.list_opts()
             if group is not None and hasattr(group, "name")}
    unknown = [f"[{section}] {key}" for section, values in sections.items()
               if section not in ("DEFAULT", "oslo_concurrency")
               for key in values if key.replace("-", "_") not in known.get(section, ())]
    if unknown:
        raise ConfError("options tempest 47 does not have: " + ", ".join(unknown))


def render(sections: dict[str, dict[str, object]]) -> str:
    lines = ["# Generated by testhosts/openstack/tempest/gen_conf.py from",
             "# `scripts/test-openstack.sh env` and the running cloud; do not edit."]
    for section, values in sections.items():
        lines.append(f"\n[{section}]")
        for key, value in values.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", required=True, type=Path,
                        help="output of `scripts/test-openstack.sh env`")
    parser.add_argument("--workspace", required=True, type=Path, help="tempest workspace")
    parser.add_argument("--driver", help="the compute_driver nova-compute must run")
    args = parser.parse_args(argv)
    env = parse_env(args.env.read_text())
    try:
        sections, facts = gather(env, args.workspace.resolve(), args.driver)
        check_options(sections)
    except ConfError as error:
        print(f"gen_conf: {error}", file=sys.stderr)
        return 2
    target = args.workspace / "etc" / "tempest.conf"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(sections))
    for fact in facts:
        print(f"gen_conf: {fact}")
    print(f"gen_conf: wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
