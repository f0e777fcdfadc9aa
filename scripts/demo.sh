#!/usr/bin/env bash
# `make demo`: compile the bundled example intents, then (as root) run the daemon in a temporary root and attach a
# container network namespace through the shim to two networks with the real CNI plugins: a bridge network (a
# static intent over a bridge CNI file) and a macvlan network. Everything it makes is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
NC=$PWD/.venv/bin/netcomp
PY=/usr/bin/python3
EX=packaging/examples
OUT=$(mktemp -d /tmp/netcomp-demo.XXXXXX)
ROOT=$(mktemp -d /tmp/netcomp-demo-root.XXXXXX)
HOSTNS=ncdemo-host-$$
CTRNS=ncdemo-ctr-$$
DAEMON=""
cleanup() {
  [ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null || true
  ip netns del "$CTRNS" 2>/dev/null || true
  ip netns del "$HOSTNS" 2>/dev/null || true
  rm -rf "$OUT" "$ROOT"
}
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. compile the examples (macvlan, ipvlan, sriov, static, DanmNet, NetworkAttachmentDefinition)"
"$NC" compile "$EX/networks.d" --static-dir "$EX/static.d" --out "$OUT"
echo; cat "$OUT/storage.conflist"

step "2. a typo is reported at its place, and nothing is written"
mkdir -p "$OUT/bad" && cp "$EX/networks.d/10-storage.yaml" "$OUT/bad/"
sed -i 's/^  mode: bridge/  mdoe: bridge/' "$OUT/bad/10-storage.yaml"
"$NC" validate "$OUT/bad" || echo "(exit status $?)"

if [ "$(id -u)" != 0 ]; then
  echo; echo "Steps 3-6 (the daemon attaching a container for real) need root: run 'sudo make demo'."
  exit 0
fi

step "3. a node: a host netns with a veth as macvlan master, intents in $ROOT/etc/netcomp"
ip netns add "$HOSTNS"
ip -n "$HOSTNS" link add demo0 type veth peer name demo0p
for d in lo demo0 demo0p; do ip -n "$HOSTNS" link set "$d" up; done
mkdir -p "$ROOT/etc/netcomp/networks.d" "$ROOT/etc/netcomp/static.d"
cat > "$ROOT/etc/netcomp/static.d/demo-bridge.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "demo-bridge", "plugins": [{"type": "bridge", "bridge": "ncdemo0", "isGateway": true,
 "ipam": {"type": "host-local", "dataDir": "$ROOT/var/lib/cni", "subnet": "10.123.0.0/24",
          "routes": [{"dst": "10.124.0.0/16", "gw": "10.123.0.1"}]}}]}
JSON
cat > "$ROOT/etc/netcomp/networks.d/mgmt.yaml" <<YAML
apiVersion: netcomp.io/v1
kind: Network
metadata: {name: mgmt}
spec: {type: static, networkID: demo-bridge}
YAML
cat > "$ROOT/etc/netcomp/networks.d/storage.yaml" <<YAML
apiVersion: netcomp.io/v1
kind: Network
metadata: {name: storage}
spec:
  type: macvlan
  hostDevice: demo0
  interfacePrefix: stor
  ipam: {type: host-local, dataDir: $ROOT/var/lib/cni, subnet: 10.125.0.0/24, rangeStart: 10.125.0.10}
YAML
echo "defaultNetwork: mgmt" > "$ROOT/etc/netcomp/netcomp.yaml"
ls "$ROOT/etc/netcomp/networks.d"

step "4. start the daemon (in the host netns, so the plugins work there) and attach a container through the shim"
ip netns exec "$HOSTNS" "$NC" daemon --root "$ROOT" --log-level warning &
DAEMON=$!
ip netns add "$CTRNS"
SHIMCONF="{\"cniVersion\": \"1.0.0\", \"name\": \"netcomp\", \"type\": \"netcomp\", \"socket\": \"$ROOT/run/netcomp/netcomp.sock\"}"
shim() {  # as a container runtime would exec it
  env -i CNI_COMMAND="$1" CNI_CONTAINERID=demo-ctr CNI_NETNS="/var/run/netns/$CTRNS" CNI_IFNAME=eth0 \
    CNI_ARGS="NETCOMP_NETWORKS=storage" CNI_PATH=/usr/lib/cni "$PY" -I -S netcomp/shim/plugin.py <<<"$SHIMCONF"
}
echo "ADD result (the default network's, as the runtime sees it):"
shim ADD
echo; echo "inside the container:"
ip -n "$CTRNS" -br addr

step "5. netcomp status, and netcomp attachments (what each container got, from the daemon's cache)"
"$NC" status --root "$ROOT"
"$NC" attachments --root "$ROOT"

step "6. detach (DEL) and check nothing is left"
shim DEL && echo "DEL ok"
ip -n "$CTRNS" -br addr
echo "leases left: $(find "$ROOT/var/lib/cni" -type f ! -name 'last_reserved*' ! -name lock | wc -l)"
