#!/usr/bin/env bash
# A small real OpenStack on this host (keystone, placement, nova with virtdriver's compute
# driver on the host's libvirtd, glance, neutron, Cinder on a test Ceph):
#
#   scripts/test-openstack.sh up|down|status|env
#
# The body, its caches, the ports, what `env` prints and what each step costs:
# testhosts/openstack/run.sh and testhosts/openstack/README.md.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec "$here/testhosts/openstack/run.sh" "$@"
