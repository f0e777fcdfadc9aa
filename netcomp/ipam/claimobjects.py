"""Address claims on the Kubernetes API: one `AddressClaim` object (addressclaims.netcomp.io, cluster-scoped) per
claimed address, named claim_name(network, address), and TenantConfig ids as `TenantClaim` objects. The API server
refuses a second object of a name (409): that is the lock every node shares. A release deletes an object only while
it is the same claim (a uid precondition). This module is loaded only with a cluster configured."""

from __future__ import annotations

import builtins
import ipaddress
import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from netcomp import foreign
from netcomp.ipam.allocator import PodState
from netcomp.ipam.idclaims import IdClaim
from netcomp.ipam.idclaims import problem as id_problem
from netcomp.ipam.pool import claim_name, network_label
from netcomp.ipam.store import Claim, Conflict, Gone, StoreUnavailable, Taken, holder_doc, holder_fields, holder_ok
from netcomp.kube import following
from netcomp.kube.apiclient import Handle
from netcomp.kube.apierrors import ApiException, one_line
from netcomp.kube.following import Selection, keep_following
from netcomp.kube.group import GROUP, NETWORK, NODE, VERSION, created, node_label
from netcomp.names import is_dns_subdomain

log = logging.getLogger("netcomp.ipam")
PLURAL, KIND = "addressclaims", "AddressClaim"
WATCH_SECONDS = 60


def labels_of(network: str, node: str) -> dict[str, str]:
    """The labels of an AddressClaim or AddressBlock: its network's (what a node selects by) and its node's, as
    the node's EndpointSlices are labelled (group.node_label). The node's name is in the spec either way."""
    return {NETWORK: network_label(network), NODE: node_label(node)}


def network_selector(networks: list[str]) -> str:
    """The label selector of the objects of `networks`."""
    return f"{NETWORK} in ({','.join(sorted({network_label(n) for n in networks}))})"


def to_object(c: Claim) -> dict[str, Any]:
    spec = {"network": c.network, "address": c.address, "node": c.node, **holder_doc(c),
            "nodeInCluster": c.node_in_cluster}  # fmt: skip
    meta = {"name": c.name, "labels": labels_of(c.network, c.node)}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": meta, "spec": spec}


def from_object(obj: Any) -> Claim | None:
    """The claim an object records; None, reported by _checked, when it is no AddressClaim of its own name
    (claim_name: the name is the lock on an address) or a field is not of its type. Nothing here raises."""
    got = _checked(obj, KIND, _claim_problem)
    if got is None:
        return None
    name, meta, spec = got
    return Claim(name, spec["network"], spec["address"], spec["node"], **holder_fields(spec),
                 node_in_cluster=spec.get("nodeInCluster") is True, uid=_uid(meta), created=created(meta))  # fmt: skip


def _checked(
    obj: Any, kind: str, problem: Callable[[str, Any], str]
) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
    """A claim object's name, metadata and spec when it is of `kind` and `problem` finds nothing wrong with its
    spec under its name; otherwise None, and reported (foreign.ignore) when it is of `kind`."""
    if not isinstance(obj, dict) or obj.get("kind") != kind:
        return None
    meta, spec = obj.get("metadata"), obj.get("spec")
    meta = meta if isinstance(meta, dict) else {}
    name = _name(obj)
    why = problem(name, spec)
    if why:
        foreign.ignore(kind, name[:253], why, {"metadata": meta})
        return None
    assert isinstance(spec, dict)
    return name, meta, spec


def _name(obj: Any) -> str:
    """An object's name, or "" when it has none that is a string."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _uid(meta: dict[str, Any]) -> str:
    return meta["uid"] if isinstance(meta.get("uid"), str) else ""


def _claim_problem(name: str, spec: Any) -> str:
    """What makes an AddressClaim object's spec no claim of its name ("": nothing)."""
    if not isinstance(spec, dict):
        return "it has no spec"
    network, address, node = spec.get("network"), spec.get("address"), spec.get("node")
    if not (isinstance(network, str) and 0 < len(network) <= 253 and is_dns_subdomain(node)):
        return "its network or node is not a name"
    if not isinstance(address, str) or len(address) > 45:
        return "its address is not an address"
    try:
        addr = ipaddress.ip_address(address)
    except ValueError:
        return f"its address {address!r} is not an address"
    if str(addr) != address:
        return f"its address {address!r} is not spelled as {addr}"
    if name != (want := claim_name(network, addr)):
        return f"its name is not {want}, the name of the claim of {addr} in network {network!r}: forged"
    return "" if holder_ok(spec) else "its holder's fields are not strings"


def store_unavailable(e: Exception, plural: str) -> StoreUnavailable:
    """Why a store of `plural` objects (netcomp.io's) cannot be used now, in an operator's words: the CRD not
    installed (404), the node's ClusterRole without it (403), another status, or the API server away."""
    if isinstance(e, ApiException):
        why = f"{e.status} {e.reason}"
        if e.status == 404:
            why += f" (is the {plural}.{GROUP} CRD installed?)"
        if e.status == 403:
            why += f" (the node's ClusterRole must allow {plural}: packaging/kubernetes/rbac.yaml)"
        return StoreUnavailable(f"the API server answered {why}")
    return StoreUnavailable(f"the API server cannot be reached: {one_line(e)}")


@dataclass(frozen=True)
class Codec:
    """A kind of claim object: its plural and kind, how a claim becomes an object and back, and whether an object
    found at a claim's name holds it (`same`: the holder; anything else is foreign and never touched)."""

    plural: str
    kind: str
    to_object: Callable[[Any], dict[str, Any]]
    from_object: Callable[[dict[str, Any]], Any]
    same: Callable[[Any, Any], bool]
    what: str  # for messages: "address claims"


ADDRESSES = Codec(PLURAL, KIND, to_object, from_object, lambda held, want: held.network == want.network,
                  "address claims")  # fmt: skip


def id_to_object(c: IdClaim) -> dict[str, Any]:
    ns, _, name = c.network.partition("/")
    net = {"namespace": ns, "name": name, **({"uid": c.network_uid} if c.network_uid else {})}
    spec = {"profile": c.profile, "vniType": c.vni_type, "vni": c.vni, "network": net, "node": c.node}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": ID_KIND, "metadata": {"name": c.name}, "spec": spec}


def id_from_object(obj: Any) -> IdClaim | None:
    """The id claim an object records; None, reported by _checked, when it is no TenantClaim of its own name
    (idclaims.problem: the name is the lock on an id) or a field is not of its type. Nothing here raises."""
    got = _checked(obj, ID_KIND, id_problem)
    if got is None:
        return None
    name, meta, spec = got
    net = spec["network"]
    return IdClaim(name, spec["profile"], spec["vniType"], spec["vni"], f"{net['namespace']}/{net['name']}",
                   net.get("uid", ""), spec.get("node", ""), _uid(meta), created(meta))  # fmt: skip


ID_PLURAL, ID_KIND = "tenantclaims", "TenantClaim"
IDS = Codec(ID_PLURAL, ID_KIND, id_to_object, id_from_object, lambda held, want: True, "TenantConfig id claims")


class ApiObjects:
    """Cluster-scoped objects of one plural of netcomp's API group: the calls on them, and why they cannot be
    followed now (said in status)."""

    kind = "Kubernetes"

    def __init__(self, api: Handle, plural: str, what: str) -> None:
        self.api, self.plural, self.what = api, plural, what
        self.custom: Any = api.custom
        self.timeout = api.timeout
        self.backoff = api.backoff()
        self.last_error: str | None = None
        api.reporting.append(self.status_error)

    def status_error(self) -> str | None:
        """The failure that holds now, and how the follower backs off."""
        return f"cannot follow {self.what}: {self.last_error}{self.backoff.saying()}" if self.last_error else None

    def _unavailable(self, e: Exception) -> StoreUnavailable:
        return store_unavailable(e, self.plural)

    def _call(self, method: str, *args: Any, gone: tuple[int, ...] = (), conflict: tuple[int, ...] = (),
              **kwargs: Any) -> Any:  # fmt: skip
        """One call on the objects: Gone or Conflict for the statuses named, StoreUnavailable for other failures."""
        try:
            call = getattr(self.custom, method)
            return call(GROUP, VERSION, self.plural, *args, _request_timeout=self.timeout, **kwargs)
        except ApiException as e:
            if e.status in gone:
                raise Gone(f"{e.status} {e.reason}") from None
            if e.status in conflict:
                raise Conflict(f"{e.status} {e.reason}") from None
            raise self._unavailable(e) from None
        except (Gone, Conflict):
            raise
        except Exception as e:
            raise self._unavailable(e) from None

    def _pages(self, selector: str | None, **kwargs: Any) -> Iterator[tuple[builtins.list[dict[str, Any]], str]]:
        """The objects `selector` picks (None: all), a page at a time, with the list's resourceVersion."""
        return following.pages(self.custom.list_cluster_custom_object, GROUP, VERSION, self.plural,
                               timeout=max(self.timeout, 30), label_selector=selector, **kwargs)  # fmt: skip

    def _events(self, rv: str, stop: threading.Event, selector: str | None, **kwargs: Any) -> following.Events:
        return following.Events(self.custom.list_cluster_custom_object, GROUP, VERSION, self.plural, rv=rv,
                                stop=stop, label_selector=selector, **kwargs)  # fmt: skip

    def _words(self, e: Exception) -> str:
        """A failed list or watch in store_unavailable's words (following.keep_following's explain and api_why)."""
        return str(self._unavailable(e))


class KubeStore(ApiObjects):
    """Claims of one kind (`codec`) as cluster-scoped objects of the API server."""

    def __init__(self, api: Handle, codec: Codec = ADDRESSES) -> None:
        super().__init__(api, codec.plural, codec.what)
        self.codec = codec
        self.selection = Selection(f"kube-{codec.plural}", self._selected)
        self._on_change_selected: Callable[[str, Any], None] = lambda name, claim: None
        self._on_listed: Callable[[], None] = lambda: None
        self._on_foreign: tuple[builtins.list[str], Callable[[str, str], None]] = ([], lambda name, what: None)

    def create(self, claim: Any) -> Any:
        try:
            obj = self._call("create_cluster_custom_object", self.codec.to_object(claim), conflict=(409,))
        except Conflict:
            raise Taken(*self._holder(claim)) from None
        got = self.codec.from_object(obj)
        assert got is not None, "the API server returns what it stored"
        return got

    def _holder(self, claim: Any) -> tuple[Any, str]:
        """Who holds a name that was taken: the claim, or what else the object is."""
        try:
            obj = self._call("get_cluster_custom_object", claim.name)
        except StoreUnavailable:
            return None, ""  # gone meanwhile, or the server away: taken all the same, holder unknown
        held = self.codec.from_object(obj)
        if held is None or not self.codec.same(held, claim):
            return None, self._what(claim.name, held)
        return held, ""

    def _what(self, name: str, held: Any) -> str:
        """An object at a claim's name that is not that claim: another network's claim, or not netcomp's."""
        return f"object {self.codec.plural}/{name}" + (
            f" of network {held.network!r}" if held else " not written by netcomp"
        )

    def delete(self, claim: Any) -> bool:
        body = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if claim.uid:
            body["preconditions"] = {"uid": claim.uid}  # type: ignore[assignment]
        try:  # 409: another claim of that name now, not ours to remove
            self._call("delete_cluster_custom_object", claim.name, body=body, gone=(404, 409))
        except Gone:
            return False
        return True

    def list(self) -> list[Any]:
        try:
            return self._list()[0]
        except Exception as e:
            raise self._unavailable(e) from None

    def _list(self, selector: str | None = None) -> tuple[builtins.list[Any], str]:
        """Every claim (of those `selector` picks), a page at a time; and the list's resourceVersion. The API's
        exceptions as they are: the follower words a 410 and backs off by them (following.keep_following)."""
        claims, rv = [], ""
        for items, version in self._pages(selector):
            rv = version
            claims += [c for c in map(self.codec.from_object, items) if c is not None]
        return claims, rv

    def follow(self, on_change: Callable[[str, Any], None], stop: threading.Event) -> None:
        """Every claim, then every change of one (following.keep_following), to on_change(name, claim or None)."""
        self._follow(None, on_change, stop, lambda: True)

    def select(self, networks: builtins.list[str], on_change: Callable[[str, Any], None],
               on_foreign: Callable[[str, str], None], on_listed: Callable[[], None]) -> None:  # fmt: skip
        """Follow only the claims of `networks` from now on (by their label), and tell `on_foreign` of objects
        without the label whose names are claim names of those networks (never touched, their addresses never
        given)."""
        if not networks:
            self.selection.select(None)
            on_listed()
            return
        self._on_foreign = (networks, on_foreign)
        self._on_change_selected, self._on_listed = on_change, on_listed
        self.selection.select(network_selector(networks))

    def _selected(self, selector: str, stop: threading.Event, current: Callable[[], bool]) -> None:
        self._follow(selector, self._on_change_selected, stop, current)

    def _foreign(self) -> None:
        """The claims of no network label (written by hand, or by something else) at names of served networks."""
        networks, on_foreign = self._on_foreign
        prefixes = {f"{n.replace('/', '.')}.v".lower(): n for n in networks}
        for items, _ in self._pages(f"!{NETWORK}"):
            for obj in items:
                name = _name(obj)
                net = next((n for p, n in prefixes.items() if name.startswith(p)), None)
                claim = self.codec.from_object(obj)
                if net is not None and (claim is None or claim.network != net):
                    on_foreign(name, self._what(name, claim))

    def _follow(self, selector: str | None, on_change: Callable[[str, Any], None], stop: threading.Event,
                current: Callable[[], bool]) -> None:  # fmt: skip
        known: set[str] = set()

        def relist() -> str:
            nonlocal known
            claims, rv = self._list(selector)
            if selector is not None:
                self._foreign()
            if not current():
                return rv
            names = {c.name for c in claims}
            for gone in known - names:
                on_change(gone, None)
            for c in claims:
                on_change(c.name, c)
            known = names
            self.last_error = None
            if selector is not None:
                self._on_listed()
            return rv

        def follow_from(rv: str, stop: threading.Event) -> str:
            events = self._events(rv, stop, selector, seconds=WATCH_SECONDS)
            for kind, obj in events:
                if not current():
                    break
                name = _name(obj)
                if kind == "DELETED":
                    known.discard(name)
                    on_change(name, None)
                elif (claim := self.codec.from_object(obj)) is not None:
                    known.add(name)
                    on_change(name, claim)
            return events.rv

        def failed(why: str) -> None:
            if why != self.last_error:  # one line per distinct failure, not one per retry
                log.warning("%s: %s", self.codec.what, why)
            self.last_error = why

        keep_following(stop, relist, follow_from, failed, self._words, self._words, self.backoff)

    # ------------------------------------------------------------------------------------------------ for GC

    def _read(self, call: Any, *args: str) -> Any | None:
        """The raw answer of one GET (no model objects); None when the object does not exist."""
        try:
            return call(*args, _request_timeout=self.timeout, _preload_content=False)
        except ApiException as e:
            if e.status == 404:
                return None
            raise self._unavailable(e) from None
        except Exception as e:
            raise self._unavailable(e) from None

    def node_exists(self, name: str) -> bool:
        return self._read(self.api.core.read_node, name) is not None

    def pod(self, ref: str) -> PodState | None:
        ns, _, name = ref.partition("/")
        resp = self._read(self.api.core.read_namespaced_pod, name, ns)
        if resp is None:
            return None
        try:
            doc = json.loads(resp.data)
            if not isinstance(doc, dict):
                raise ValueError("not an object")
        except Exception as e:
            raise self._unavailable(e) from None
        return PodState(
            str((doc.get("spec") or {}).get("nodeName") or ""), str((doc.get("metadata") or {}).get("uid", ""))
        )
