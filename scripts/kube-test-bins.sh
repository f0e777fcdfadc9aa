#!/bin/bash
# Builds the real Kubernetes API server and kubelet the Kubernetes tests run against, from Debian's own `kubernetes`
# source package (1.20.2, vendor/ included; no binary is packaged), the static `pause` binary of the same tree (a
# pod sandbox's image), and unpacks Debian's etcd-server beside them.
# Everything goes to a cache dir outside the checkout (default /var/cache/netcomp-test/kube); a second run with
# the binaries present does nothing. /etc/apt is never touched: a private deb-src list and lists dir are used.
# Usage: scripts/kube-test-bins.sh [CACHE_DIR]     (root; ~12 min and ~1.3 GB RAM the first time)
set -euo pipefail

# All in a function: bash reads it whole before running it, so editing this file meanwhile is harmless.
main() {
    CACHE=${1:-/var/cache/netcomp-test/kube}
    if [ -x "$CACHE/bin/kube-apiserver" ] && [ -x "$CACHE/bin/etcd" ] && [ -x "$CACHE/bin/kubelet" ] \
        && [ -x "$CACHE/bin/pause" ]; then
        exit 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    need=()
    for pkg in golang-go rsync make openssl dpkg-dev gcc libc6-dev; do
        dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
    done
    if [ ${#need[@]} -gt 0 ]; then
        apt-get -o DPkg::Lock::Timeout=300 update -qq
        apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${need[@]}" >/dev/null
    fi
    mkdir -p "$CACHE/bin"
    WORK=$(mktemp -d "$CACHE/build.XXXXXX")
    trap 'rm -rf "$WORK"' EXIT
    cd "$WORK"

    # deb-src for the mirror the system already uses (bookworm keeps it in debian.sources, deb822).
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    uri=${uri:-http://deb.debian.org/debian}
    echo "deb-src $uri bookworm main" > sources.list
    mkdir -p lists/partial
    APT=(-o Dir::Etc::sourcelist="$WORK/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$WORK/lists")
    apt-get "${APT[@]}" update -q >/dev/null
    apt-get "${APT[@]}" source --download-only -q kubernetes >/dev/null
    tar xzf kubernetes_*.orig.tar.gz

    # The vendored modern-go/reflect2 1.0.1 crashes on go >= 1.18 when custom objects are created: use Debian's 1.0.2.
    apt-get download -q golang-github-modern-go-reflect2-dev >/dev/null
    dpkg -x golang-github-modern-go-reflect2-dev_*.deb reflect2
    rm -rf kubernetes-1.20.2/vendor/github.com/modern-go/reflect2
    cp -r reflect2/usr/share/gocode/src/github.com/modern-go/reflect2 kubernetes-1.20.2/vendor/github.com/modern-go/reflect2

    # One binary per make: kubelet 1.20 builds in GOPATH mode only (`go build` in the tree wants go.mod updates).
    for what in kube-apiserver kubelet; do
        [ -x "$CACHE/bin/$what" ] && continue
        (cd kubernetes-1.20.2 && GOPROXY=off CGO_ENABLED=0 make WHAT=cmd/$what >build.log 2>&1) || {
            tail -30 kubernetes-1.20.2/build.log >&2
            exit 1
        }
        install -m 0755 kubernetes-1.20.2/_output/bin/$what "$CACHE/bin/$what.new"
        mv "$CACHE/bin/$what.new" "$CACHE/bin/$what"
    done
    # The sandbox image's only binary: static, so the image needs no libc.
    gcc -Os -static -o "$CACHE/bin/pause.new" kubernetes-1.20.2/build/pause/linux/pause.c
    mv "$CACHE/bin/pause.new" "$CACHE/bin/pause"

    # etcd: unpacked, not installed (installing would start a service on :2379).
    apt-get download -q etcd-server >/dev/null
    dpkg -x etcd-server_*.deb etcd
    install -m 0755 etcd/usr/bin/etcd "$CACHE/bin/etcd"
    echo "built kube-apiserver, kubelet and pause in $CACHE/bin, etcd unpacked there"
}

main "$@"
