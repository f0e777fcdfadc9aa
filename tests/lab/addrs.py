"""The cluster's record of the addresses in use (ipam: {type: cluster}), whatever records them: AddressClaim
objects (blockSize 1, and an earlier version's), and the entries of the AddressBlock objects' records (`used` by
the block's node, `lent` to another), each in an AddressClaim's shape ({metadata, spec: {network, address, node,
containerID, pod}}). Blocks' records are written behind: flush the daemons first."""

from __future__ import annotations

from typing import Any

from netcomp.ipam import blockobjects
from netcomp.ipam.claimobjects import PLURAL
from netcomp.kube.group import GROUP, VERSION

CLAIMS = (GROUP, VERSION, PLURAL)
BLOCKS = (GROUP, VERSION, blockobjects.PLURAL)


def in_use(custom: Any, net: str | None = None) -> list[dict[str, Any]]:
    items = custom.list_cluster_custom_object(*CLAIMS)["items"]
    for b in custom.list_cluster_custom_object(*BLOCKS)["items"]:
        spec = b["spec"]
        entries = [(a, spec["node"], doc) for a, doc in (spec.get("used") or {}).items()]
        entries += [(a, doc["node"], doc) for a, doc in (spec.get("lent") or {}).items()]
        for addr, node, doc in entries:
            one = {"network": spec["network"], "address": addr, "node": node, "containerID": doc.get("containerID")}
            items.append({"metadata": b["metadata"], "spec": {**one, **({"pod": doc["pod"]} if "pod" in doc else {})}})
    return [o for o in items if net is None or o["spec"]["network"] == net]
