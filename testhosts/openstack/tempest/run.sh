#!/usr/bin/env bash
# tempest 47's multiattach tests against scripts/test-openstack.sh's cloud:
#
#     testhosts/openstack/tempest/run.sh [virtdriver|nova] [--list]
#
# virtdriver (default): nova-compute must run compute_driver = virtdriver.nova.LibvirtDriver;
# nova: the comparison run, nova-compute must run libvirt.LibvirtDriver (README.md says how to
# switch). --list: print the selection and exit (needs only the venv).
#
# Steps: tempest's venv (venv.sh, cached); the cloud must be up (`status`); `env` into the
# workspace $VD_OS_DIR/tempest-MODE; gen_conf.py writes its etc/tempest.conf from `env` and the
# running cloud; the selection (every test of tempest's compute API, volume API and scenario
# suites whose id says multiattach) must equal tests.txt; tempest's own runner (`tempest run
# --regex`, stestr) runs it and prints its output and totals; summary.py prints one line per
# test with tempest's skip reasons. Saved in $WS/results/DATE/: console.log, tempest.subunit,
# tempest.log (tempest's debug log: every request and answer), tempest.conf, openstack.env,
# summary.txt. Copied to $VD_TEMPEST_RESULTS/ too when set (`down` removes $VD_OS_DIR).
#
# Exit status: 0 when every selected test passed or was skipped by tempest; 1 on a failure, an
# error, a test without a result, or when nova-compute's log shows another compute driver;
# 2 when the run could not start (venv, cloud down, conf). VD_TEMPEST_CONCURRENCY (2) workers.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
REGEX='^tempest\.(api\.(compute|volume)|scenario)\..*(?i:multiattach)'
CONCURRENCY=${VD_TEMPEST_CONCURRENCY:-2}
log() { printf 'tempest: %s\n' "$*" >&2; }

mode=virtdriver list=0
for arg in "$@"; do
    case $arg in
        virtdriver|nova) mode=$arg ;;
        --list) list=1 ;;
        *) echo "usage: $0 [virtdriver|nova] [--list]" >&2; exit 2 ;;
    esac
done
case $mode in
    virtdriver) driver=virtdriver.nova.LibvirtDriver ;;
    nova) driver=libvirt.LibvirtDriver ;;
esac

venv=$("$here/venv.sh") || { log "tempest's venv failed (venv.sh)"; exit 2; }

# the selection, listed by tempest itself; must be tests.txt exactly
select_tests() {  # select_tests DIR CONF: lists into DIR/selected.txt (tempest run --list-tests)
    # stestr lists only in a directory with a repository (`tempest run` itself makes one)
    [ -d "$1/.stestr" ] || (cd "$1" && "$venv/bin/stestr" init >/dev/null) || return 1
    (cd "$1" && "$venv/bin/tempest" run ${2:+--config-file "$2"} --list-tests --regex "$REGEX") \
        >"$1/list.out" 2>&1 || { cat "$1/list.out" >&2; log "tempest run --list-tests failed"; return 1; }
    grep '^tempest\.' "$1/list.out" | sed 's/\[.*//' | sort >"$1/selected.txt"
    if ! diff -u <(grep -v '^#' "$here/tests.txt" | sort) "$1/selected.txt" >"$1/selection.diff"; then
        cat "$1/selection.diff" >&2
        log "the regex selects other tests than tests.txt (- tests.txt, + tempest's list)"
        return 1
    fi
}

if [ $list = 1 ]; then
    tmp=$(mktemp -d)
    # listing imports the test modules only; an empty conf is enough
    : >"$tmp/tempest.conf"
    select_tests "$tmp" "$tmp/tempest.conf" || { rm -rf "$tmp"; exit 1; }
    cat "$tmp/selected.txt"; rm -rf "$tmp"; exit 0
fi

"$repo/scripts/test-openstack.sh" status >/dev/null 2>&1 ||
    { log "the control plane is not up: scripts/test-openstack.sh status says"
      "$repo/scripts/test-openstack.sh" status >&2; exit 2; }
envtext=$("$repo/scripts/test-openstack.sh" env) || { log "scripts/test-openstack.sh env failed"; exit 2; }
state=$(eval "$envtext"; echo "${VD_OS_DIR:-}")
logdir=$(eval "$envtext"; echo "${VD_OS_LOG_DIR:-}")
up=$(eval "$envtext"; echo "${VD_OS_UP:-0}")
[ "$up" = 1 ] || { log "scripts/test-openstack.sh env says VD_OS_UP=$up"; exit 2; }
[ -n "$state" ] && [ -d "$state" ] || { log "env printed no VD_OS_DIR (or it is missing: '$state')"; exit 2; }

ws=$state/tempest-$mode
run=$ws/results/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$run" "$ws/logs" "$ws/tempest_lock"
printf '%s\n' "$envtext" >"$ws/openstack.env"
"$venv/bin/python" "$here/gen_conf.py" --env "$ws/openstack.env" --workspace "$ws" --driver "$driver" \
    | tee "$run/gen_conf.txt" || { log "no tempest.conf (gen_conf.py)"; exit 2; }
[ -s "$ws/etc/tempest.conf" ] || exit 2
grep -q '^resize = true' "$ws/etc/tempest.conf" ||
    log "warning: nova.conf has no allow_resize_to_same_host = True: tempest will skip the resize test"
cp "$ws/etc/tempest.conf" "$ws/openstack.env" "$run/"
rm -f "$ws/.stestr.conf"   # tempest writes it anew, naming this venv's tempest
select_tests "$ws" "$ws/etc/tempest.conf" || exit 1

compute_log=$logdir/nova-compute.log
lines_before=$(wc -l <"$compute_log" 2>/dev/null || echo 0)
: >"$ws/logs/tempest.log"
log "running $(wc -l <"$ws/selected.txt") tests, $CONCURRENCY workers, compute driver $driver"
t0=$(date +%s)
(cd "$ws" && "$venv/bin/tempest" run --config-file "$ws/etc/tempest.conf" --regex "$REGEX" \
    --concurrency "$CONCURRENCY") 2>&1 | tee "$run/console.log"
rc=${PIPESTATUS[0]}
elapsed=$(( $(date +%s) - t0 ))
(cd "$ws" && "$venv/bin/stestr" last --subunit) >"$run/tempest.subunit" 2>/dev/null
cp "$ws/logs/tempest.log" "$run/tempest.log" 2>/dev/null

echo
echo "== tempest $mode ($driver): ${elapsed}s"
"$venv/bin/python" "$here/summary.py" "$run/tempest.subunit" --expect "$here/tests.txt" | tee "$run/summary.txt"
src=${PIPESTATUS[0]}
[ "$src" = 0 ] || rc=1

# which compute driver nova-compute loaded, and virtdriver's own log lines during the run
if [ -r "$compute_log" ]; then
    loaded=$(grep -o "Loading compute driver '[^']*'" "$compute_log" | tail -1)
    echo "nova-compute: ${loaded:-no 'Loading compute driver' line in $compute_log}" | tee -a "$run/summary.txt"
    case $loaded in *"'$driver'"*) ;; *) log "nova-compute did not load $driver"; rc=1 ;; esac
    tail -n +"$((lines_before + 1))" "$compute_log" >"$run/nova-compute.log"
    echo "nova-compute during the run: $(grep -c 'virtdriver' "$run/nova-compute.log") lines naming virtdriver," \
        "$(grep -c ' ERROR ' "$run/nova-compute.log") ERROR lines ($run/nova-compute.log)" | tee -a "$run/summary.txt"
else
    log "warning: no nova-compute log at $compute_log: cannot tell which driver ran"
fi
if [ -n "${VD_TEMPEST_RESULTS:-}" ]; then
    mkdir -p "$VD_TEMPEST_RESULTS" && cp -r "$run" "$VD_TEMPEST_RESULTS/$mode-$(basename "$run")"
fi
echo "results: $run (tempest rc $rc)"
[ "$rc" = 0 ] || exit 1
exit 0
