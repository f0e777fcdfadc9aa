"""A claim of one address, what a store of claims does, and what a store of blocks does. The store's own
uniqueness of names is the lock: a claim is created under claim_name(network, address), a block under
blocks.block_name(network, block), and a second create of that name fails (Taken) whoever tries it, on whichever
node. What an allocator does for an ADD (`AddressAllocator`) is the same whichever it is."""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

if TYPE_CHECKING:
    from netcomp.ipam.pool import IPAddress, Pool


_REQUIRED = ("name", "network", "address", "node", "container_id", "ifname")
_OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "pod": str, "pod_uid": str, "node_in_cluster": bool, "uid": str, "created": (int, float), "block": str,
    "ipam_claim": str,
}  # fmt: skip
CLAIM_HOLDER = "ipamclaim-"  # the containerID of a block's entry an IPAMClaim holds: this, then the claim's uid


@dataclass(frozen=True, slots=True)
class Claim:
    """Who holds an address: the network and address, the node that claimed it and for which container (its
    runtime interface, and pod when kubelet named one). `uid`: the store's identity of this claim, so that
    releasing it can never remove a later claim of the same address; `created`: when (epoch seconds)."""

    name: str
    network: str
    address: str
    node: str
    container_id: str
    ifname: str
    pod: str = ""  # namespace/name
    pod_uid: str = ""
    node_in_cluster: bool = False  # the node is a Node of the cluster (only then may another node free it)
    uid: str = ""
    created: float = 0.0
    block: str = ""  # the block it is given from (its object's name); "": a claim object of its own
    # namespace/name/uid of the IPAMClaim whose address this is (ipam/ipamclaims.py): a pod's use of it, or, with
    # container_id CLAIM_HOLDER + uid, the claim's own entry in its block. A pod's use is never given back.
    ipam_claim: str = ""

    def to_doc(self) -> dict[str, Any]:
        doc = {k: getattr(self, k) for k in Claim.__slots__}  # its fields are scalars: asdict's deep copy costs more
        if not self.block:
            del doc["block"]  # a claim object's record reads as it did before blocks
        if not self.ipam_claim:
            del doc["ipam_claim"]
        return doc

    @staticmethod
    def from_doc(d: dict[str, Any]) -> Claim:
        return Claim(**{k: d[k] for k in Claim.__slots__ if k in d})

    @staticmethod
    def check_doc(d: dict[str, Any]) -> None:
        """ValueError naming what is wrong in a claim's record as to_doc writes it (one a hand edit or a disk
        fault broke): every field there, of its type, its address one, and its block's prefix one of that
        address's family (blocks.block_name), for what reads the records to rely on."""
        missing = [k for k in _REQUIRED if not isinstance(d.get(k), str)]
        wrong = [k for k, t in _OPTIONAL.items() if k in d and not isinstance(d[k], t)]
        if missing or wrong:
            raise ValueError(f"a claim without {', '.join(missing + wrong)} (or not of its type)")
        addr = ipaddress.ip_address(d["address"])  # ValueError naming it
        prefix = str(d.get("block") or "").rpartition("-")[2]
        if prefix.isdigit() and int(prefix) > addr.max_prefixlen:
            raise ValueError(f"a claim of block {d['block']!r}, whose prefix no {addr} has")

    def uses_ipam_claim(self) -> bool:
        """A pod's use of an address an IPAMClaim holds: never claimed, settled or given back by the pod."""
        return bool(self.ipam_claim) and not self.container_id.startswith(CLAIM_HOLDER)

    def order(self) -> tuple[str, int, int]:
        """Where it sorts: by network, then by address, IPv4 first."""
        a = ipaddress.ip_address(self.address)
        return self.network, a.version, int(a)

    def shown(self) -> dict[str, Any]:
        """The claim as `netcomp ipam show` lists it."""
        doc = {"address": self.address, "node": self.node, "containerID": self.container_id,
               "interface": self.ifname, "pod": self.pod or None}  # fmt: skip
        if self.container_id.startswith(CLAIM_HOLDER):  # an IPAMClaim's entry: its namespace/name where known
            doc["ipamClaim"] = self.ipam_claim.rpartition("/")[0] or self.container_id
        return doc

    def holder(self) -> str:
        """Who holds it, for a person: pod (or container, or IPAMClaim) and node."""
        if self.container_id.startswith(CLAIM_HOLDER):
            ns, _, rest = self.ipam_claim.partition("/")
            claim = f"{ns}/{rest.partition('/')[0]}" if rest else self.container_id[len(CLAIM_HOLDER) :]
            return f"IPAMClaim {claim} (its block's entry on node {self.node})"
        who = f"pod {self.pod}" if self.pod else f"container {self.container_id}"
        return f"{who} on node {self.node}"


class HolderFields(TypedDict):
    container_id: str
    ifname: str
    pod: str
    pod_uid: str


def holder_doc(c: Claim) -> dict[str, Any]:
    """Who holds a claim as the cluster's objects say it (an AddressClaim's spec, an AddressBlock's `used` and
    `lent` entries): {containerID, interface, pod: {namespace, name, uid}}."""
    doc: dict[str, Any] = {"containerID": c.container_id, "interface": c.ifname}
    if c.pod:
        ns, _, name = c.pod.partition("/")
        doc["pod"] = {"namespace": ns, "name": name, **({"uid": c.pod_uid} if c.pod_uid else {})}
    return doc


def holder_fields(doc: dict[str, Any]) -> HolderFields:
    """holder_doc read back, as a Claim's fields (empty where the document says nothing)."""
    pod = doc.get("pod")
    pod = pod if isinstance(pod, dict) else {}
    return HolderFields(
        container_id=str(doc.get("containerID", "")),
        ifname=str(doc.get("interface", "")),
        pod=f"{pod['namespace']}/{pod['name']}" if pod.get("namespace") and pod.get("name") else "",
        pod_uid=str(pod.get("uid", "")),
    )


def holder_ok(doc: dict[str, Any], text: tuple[str, ...] = ("containerID", "interface")) -> bool:
    """Whether a document reads as holder_doc writes it: strings for the `text` keys it has, a pod of strings."""
    pod = doc.get("pod")
    if any(k in doc and not isinstance(doc[k], str) for k in text):
        return False
    return pod is None or (isinstance(pod, dict) and all(isinstance(v, str) for v in pod.values()))


class Taken(Exception):
    """The name is taken: by `holder` (a claim of the same network), or by something that is not a claim of this
    network at all (`foreign`: another network's object, or one netcomp did not write); either way it is never
    touched."""

    def __init__(self, holder: Any, foreign: str = "") -> None:
        """`holder`: the claim that has the name (a Claim, or the IdClaim of a store of ids), or None."""
        super().__init__(foreign or (holder.holder() if isinstance(holder, Claim) else "taken"))
        self.holder = holder
        self.foreign = foreign


class StoreUnavailable(Exception):
    """The store cannot be reached or did not answer (the API server is away): nothing was claimed or freed."""


class Store(Protocol):
    kind: str  # "Kubernetes" or "node-local", for status

    def create(self, claim: Claim) -> Claim:
        """The claim as stored (uid and created set). Taken when the name exists; StoreUnavailable."""

    def delete(self, claim: Claim) -> bool:
        """Remove the claim if it is still this one (same uid). False when it is gone or is another claim now.
        StoreUnavailable."""

    def list(self) -> list[Claim]:
        """Every claim. StoreUnavailable."""

    def follow(self, on_change: Callable[[str, Claim | None], None], stop: threading.Event) -> None:
        """Until stop: call on_change(name, claim or None when it is gone) for every change made by anyone (a
        watch), after listing. Returns at once for a store only this daemon writes."""


class Gone(Exception):
    """The block's object is not there any more, or is another object of that name now (another uid)."""


class Conflict(Exception):
    """A write made on one version of a block's record found another: nothing was written."""


class ClaimKeeper(Protocol):
    """What an ADD asks of the IPAMClaims' addresses (ipam/ipamclaims.py)."""

    def take(self, pool: Pool, names: tuple[str, ...], ifname: str, ref: str, pod: tuple[str, str],
             container_id: str, *, create: bool = False) -> list[Claim]:  # fmt: skip
        """The addresses of claim `ref` (namespace/name) for a pod's interface, as the pod's uses of them."""


class AddressAllocator(Protocol):
    """What an ADD and a DEL ask of the addresses of networks with `ipam: {type: cluster}`."""

    @property
    def persistent(self) -> ClaimKeeper | None:
        """The IPAMClaims' addresses (None: no cluster, or no blocks)."""

    def claim(self, pool: Pool, family_set: int, holder: Any, exact: IPAddress | None = None) -> Claim:
        """One address of a range set of the pool (or exactly `exact`) for holder, held as in flight until
        settle(). DelegateError: 11 (exhausted, the store away, `exact` held), 7 (`exact` not in the pool)."""

    def settle(self, claims: list[Claim]) -> None:
        """The claims are in a cache entry now (or were given back): no longer in flight."""

    def release(self, claims: list[Claim], reason: str = "release") -> None:
        """Give claims back. DelegateError 11 when a claim object cannot be deleted now (kept recorded)."""

    def claims(self, network: str | None = None) -> list[Claim]:
        """The addresses in use (of one network), as this node knows them."""

    def show(self, pools: dict[str, Pool]) -> list[dict[str, Any]]:
        """Per network its pool, what is in use and free, and every address in use (ipam show, explain)."""
