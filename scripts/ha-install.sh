#!/usr/bin/env bash
# Installs what `make ha` runs and the machine lacks, from Debian's packages:
#   - patroni (3.x; its etcd3 support talks to etcd's v3 JSON gateway),
#   - etcd-server (etcd 3.4 in bookworm),
#   - haproxy,
# and PostgreSQL's server binaries (scripts/install-deps.sh, `make deps`).
# It changes nothing when everything is already there.
#
# The packages would start their own daemons on install (etcd on 2379,
# haproxy on its packaged configuration): the formation runs its own, on
# its own ports, so a policy-rc.d that refuses every start is in place for
# the install (invoke-rc.d asks it: exit 101 is "action forbidden", see
# /usr/share/doc/init-system-helpers/README.policy-rc.d), and anything the
# install started all the same is stopped afterwards.
set -euo pipefail

log() { printf 'ha-install: %s\n' "$*" >&2; }

missing=()
command -v patroni >/dev/null 2>&1 || missing+=(patroni)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  log "missing: ${missing[*]}; install them with: sudo apt-get install ${missing[*]}"
  exit 1
fi

policy=/usr/sbin/policy-rc.d
restore_policy=
if [ -e "$policy" ]; then
  cp -p "$policy" "$policy.ha-install"
  restore_policy=1
fi
printf '#!/bin/sh\n# ha-install.sh: no service starts during the install\nexit 101\n' > "$policy"
chmod 755 "$policy"
cleanup() {
  if [ -n "$restore_policy" ]; then mv -f "$policy.ha-install" "$policy"; else rm -f "$policy"; fi
}
trap cleanup EXIT

log "installing ${missing[*]} (apt-get install)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confold "${missing[@]}" >/dev/null

# Whatever started anyway (a package's postinst calling the daemon
# directly): stop it, by the PID files the packages write, else by the
# exact executable path.
for exe in /usr/bin/etcd /usr/sbin/haproxy /usr/bin/patroni; do
  for pid in $(pgrep -x -f "$exe( .*)?" 2>/dev/null || true); do
    # Only what runs as the packages' users, not a formation's own.
    user=$(ps -o user= -p "$pid" 2>/dev/null || true)
    case "$user" in etcd|haproxy) log "stopping $exe (pid $pid, started by the install)"; kill "$pid" || true ;; esac
  done
done
log "installed: $(patroni --version 2>&1 | head -1); $(etcd --version 2>&1 | head -1); $(haproxy -v 2>&1 | head -1)"
