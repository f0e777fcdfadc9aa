"""Intent files' text as the tests write them: a Network of any spec in one line each for metadata and spec, and
a macvlan network on host-local written out in block style, with a host device every machine has."""

from __future__ import annotations

# A good intent: format it with name, dev (its hostDevice) and subnet.
GOOD = """apiVersion: netcomp.io/v1
kind: Network
metadata:
  name: {name}
spec:
  type: macvlan
  hostDevice: {dev}
  ipam:
    type: host-local
    subnet: {subnet}
"""
# lo: a host device every machine has (one that is not there is a warning away from the node, an error with
# --strict: tests/unit/test_cli.py's test_what_only_a_node_has_is_a_warning_unless_strict).
DEVICE = "lo"


def intent(name: str, spec: str) -> str:
    """A Network named `name` whose spec is `spec`, in YAML's flow style ("{type: static, networkID: x}")."""
    return f"apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {{name: {name}}}\nspec: {spec}\n"
