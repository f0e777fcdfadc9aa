#!/bin/bash
# Makes the Debian 13 (trixie) root the system tests build, install and boot netcomp's package in: debootstrap
# from the Debian mirror this machine's apt already uses, then the tools the tests run there (debhelper, lintian,
# the CNI plugins, systemd). It goes to a cache dir outside the checkout (default /var/cache/netcomp-test/trixie,
# the root itself in its root/) and is never changed afterwards: the tests boot it with an overlay on tmpfs.
# A second run with the root there (and made from the same package list) does nothing.
# Usage: scripts/trixie-root.sh [CACHE_DIR]     (root; 1 minute on a fast mirror, allow 5, and 850 MB the first time)
set -euo pipefail

# What the root holds. Changing this list makes the next run build the root again.
PACKAGES="python3 python3-venv python3-pip debhelper build-essential lintian ca-certificates \
containernetworking-plugins nftables iproute2 systemd systemd-sysv dbus"

# Runs a command in ROOT with systemd-nspawn, from a cgroup of its own (else nspawn, with no systemd on the host to
# ask for a scope, leaves its cgroups at the root of the hierarchy), removed afterwards.
in_root() {
    local root=$1 cg h rc=0
    shift
    cg=nctest-trixie-root-$$
    for h in systemd unified; do [ ! -d /sys/fs/cgroup/$h ] || mkdir -p /sys/fs/cgroup/$h/$cg; done
    (
        for h in systemd unified; do [ ! -d /sys/fs/cgroup/$h ] || echo $BASHPID >/sys/fs/cgroup/$h/$cg/cgroup.procs; done
        exec systemd-nspawn --quiet --register=no --keep-unit --directory="$root" \
            --setenv=DEBIAN_FRONTEND=noninteractive -- "$@"
    ) </dev/null || rc=$?
    for h in systemd unified; do
        [ ! -d /sys/fs/cgroup/$h/$cg ] || find /sys/fs/cgroup/$h/$cg -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
    # nspawn leaves these behind, empty; others' may be in use (rmdir removes only empty dirs).
    rmdir /run/systemd/nspawn/propagate/* /run/systemd/nspawn/propagate /run/systemd/nspawn/locks \
        /run/systemd/nspawn 2>/dev/null || true
    return $rc
}

# Removes the build dir; first unmounts whatever debootstrap left mounted in it (a failed run can leave /proc,
# /sys or a bind of /dev there, and rm must never reach through those).
cleanup() {
    local mnt
    for mnt in $(awk -v w="$WORK/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r); do
        umount -l "$mnt" || true
    done
    rm -rf --one-file-system "$WORK"
}

# All in a function: bash reads it whole before running it, so editing this file meanwhile is harmless.
main() {
    CACHE=${1:-/var/cache/netcomp-test/trixie}
    stamp="trixie: $PACKAGES"
    if [ "$(cat "$CACHE/root/.netcomp-test-root" 2>/dev/null)" = "$stamp" ]; then
        exit 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    need=()
    for pkg in debootstrap systemd-container debian-archive-keyring; do
        dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
    done
    if [ ${#need[@]} -gt 0 ]; then
        apt-get -o DPkg::Lock::Timeout=300 update -qq
        apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${need[@]}" >/dev/null
    fi
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock"
    flock 9  # two runs at once: the second waits, then finds the root made
    if [ "$(cat "$CACHE/root/.netcomp-test-root" 2>/dev/null)" = "$stamp" ]; then
        exit 0
    fi
    WORK=$(mktemp -d "$CACHE/build.XXXXXX")
    trap cleanup EXIT

    # The mirror the system already uses (bookworm keeps it in debian.sources, deb822).
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    uri=${uri:-http://deb.debian.org/debian}
    debootstrap --variant=minbase --include=python3,python3-venv trixie "$WORK/root" "$uri" >"$WORK/debootstrap.log" 2>&1 || {
        tail -30 "$WORK/debootstrap.log" >&2
        exit 1
    }
    # The rest with trixie's own apt (it resolves alternatives, which debootstrap's --include does not), in a
    # container sharing this machine's network; no service starts (there is no systemd running in it).
    # shellcheck disable=SC2086
    in_root "$WORK/root" sh -c "apt-get update -q && apt-get install -y -q --no-install-recommends $PACKAGES && apt-get clean" \
        >"$WORK/apt.log" 2>&1 || {
        tail -30 "$WORK/apt.log" >&2
        exit 1
    }
    # Booted under nspawn: no console getty or network setup to wait for.
    rm -f "$WORK/root/etc/systemd/system/getty.target.wants/"*
    echo "$stamp" >"$WORK/root/.netcomp-test-root"
    rm -rf "$CACHE/root"
    mv "$WORK/root" "$CACHE/root"
    echo "made $CACHE/root ($(du -sh "$CACHE/root" | cut -f1))"
}

main "$@"
