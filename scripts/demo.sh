#!/usr/bin/env bash
# `make demo`: compile the bundled example intents (native, DanmNet and NetworkAttachmentDefinition) into a
# temporary output dir, show what came out, what an edit changes, and what an error looks like.
set -euo pipefail
cd "$(dirname "$0")/.."
NC=.venv/bin/netcomp
EX=packaging/examples
OUT=$(mktemp -d /tmp/netcomp-demo.XXXXXX)
WORK=$(mktemp -d /tmp/netcomp-demo-intents.XXXXXX)
trap 'rm -rf "$OUT" "$WORK"' EXIT
cp "$EX"/networks.d/*.yaml "$WORK"/

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "validate the examples ($(ls "$WORK" | wc -l) files: macvlan, ipvlan, sriov, static, DanmNet, NAD)"
"$NC" validate "$WORK" --static-dir "$EX/static.d"

step "compile them into $OUT"
"$NC" compile "$WORK" --static-dir "$EX/static.d" --out "$OUT"
ls -l "$OUT"

step "the macvlan network on VLAN 120 (storage.conflist)"
cat "$OUT/storage.conflist"

step "compile again: nothing changes, nothing is rewritten"
"$NC" compile "$WORK" --static-dir "$EX/static.d" --out "$OUT"

step "edit an intent (mtu 9000 -> 1500) and look at the diff before writing"
sed -i 's/mtu: 9000/mtu: 1500/' "$WORK/10-storage.yaml"
"$NC" compile "$WORK" --static-dir "$EX/static.d" --out "$OUT" --diff || true

step "a typo: errors point at the text, and nothing is written"
sed -i 's/    mode: bridge/    mdoe: bridge/; s/^  mode: bridge/  mdoe: bridge/' "$WORK/10-storage.yaml"
"$NC" compile "$WORK" --static-dir "$EX/static.d" --out "$OUT" || echo "(exit status $?)"
