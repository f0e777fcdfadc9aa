"""This module gives the addresses IPAMClaims hold (the multi-network spec v1.3's `ipam-claim-reference`): an element
naming a claim gets the claim's address, on whichever node its pod runs. The address is an entry of the block it lies
in, held by the claim (containerID CLAIM_HOLDER + the claim's uid), never by a pod: the block's holder never gives it
to anyone else and a pod's DEL never frees it. The first ADD naming a claim with no status.ips takes an address as
any ADD does (this node's block, or borrowed), marks it as the claim's, records it here (crash-safe) and has its
block's record written before it writes the claim's status; a later ADD reads the claim by name (the only API call an
ADD with a claim makes beyond that) and checks the block's record agrees the address is the claim's before it uses
it. docs/kubernetes.md, "Persistent addresses"."""

from __future__ import annotations

import concurrent.futures
import contextlib
import ipaddress
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from netcomp import faults
from netcomp.cni.codes import E_INVALID_CONFIG, E_IO, E_TRY_LATER
from netcomp.errors import DelegateError
from netcomp.ipam.allocator import Holder
from netcomp.ipam.blockalloc import BlockAllocator
from netcomp.ipam.blocks import Layout, block_name
from netcomp.ipam.blockstate import claim_of
from netcomp.ipam.claimrecord import ClaimRecord, Kept
from netcomp.ipam.ipamclaimapi import (
    FINALIZER,
    Away,
    Changed,
    ClaimApi,
    ClaimObject,
    Missing,
    controller_ref,
    controller_uid,
    going,
    running,
)
from netcomp.ipam.pool import IPAddress, Pool
from netcomp.ipam.store import CLAIM_HOLDER, Claim, StoreUnavailable
from netcomp.kube.group import node_label

log = logging.getLogger("netcomp.ipam")


def _block_of(pool: Pool, addr: IPAddress) -> str | None:
    """The name of the block of `pool` that `addr` lies in (None: it is no address of the pool)."""
    fs = next((i for i, rs in enumerate(pool.sets) for r in rs if addr in r.subnet), None)
    net = Layout(pool, fs).block_of(addr) if fs is not None else None
    return block_name(pool.network, net) if net is not None else None


def cidr(e: Claim, pool: Pool) -> str:
    """An entry's address with its pool subnet's prefix (as status.ips holds it)."""
    addr = ipaddress.ip_address(e.address)
    r = pool.range_for(addr)
    return f"{addr}/{r.subnet.prefixlen if r is not None else addr.max_prefixlen}"


class IPAMClaims:
    def __init__(self, api: ClaimApi, blocks: BlockAllocator, node: str, path: Path, timeout: float) -> None:
        self.api, self.blocks, self.node, self.timeout = api, blocks, node, timeout
        self.record = ClaimRecord(path, node)
        self.kept = self.record.kept  # by the claim's uid
        self._lock = threading.Lock()  # the record, and which claims are in an ADD now
        self._busy: dict[str, threading.Lock] = {}
        self.strays: dict[str, ClaimObject] = {}  # by uid: unanswered() looks at them again (recheck)
        self.unbuilt: dict[str, ClaimObject] = {}  # by uid: claims whose files _rebuild writes again (recheck)
        # Starts following the claims labelled with this node (ipamclaimapi.Following.start, once): only once it
        # marks or keeps a claim, so that a cluster without the IPAMClaim CRD is never asked about them.
        self.start_following: Callable[[], None] = lambda: None
        self._owners = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ipamclaims-owner")

    # ------------------------------------------------------------------------------------------------ record

    def load(self) -> list[Claim]:
        """The claims this node knows from its record; the block entries it holds for them (for the blocks). The
        entries of a claim whose file cannot be read stay as its blocks' objects record them (kept_holders) until
        the claims labelled with this node are listed (_rebuild)."""
        held = self.record.load()
        self.blocks.kept_holders = {CLAIM_HOLDER + uid for uid in self.record.unread}
        return held

    def keep(self, k: Kept) -> None:
        if k.held:
            self.start_following()
        uid = k.key.rpartition("/")[2]
        with self._lock:
            self.kept[uid] = k
            try:
                self.record.write(uid)
            except OSError as e:
                raise DelegateError(E_IO, f"cannot write {self.record.file(uid)}: {e.strerror}",
                                    "no plugin was run") from None  # fmt: skip

    def _busy_lock(self, ref: str) -> threading.Lock:
        """One ADD (or deletion) of a claim at a time on this node."""
        with self._lock:
            return self._busy.setdefault(ref, threading.Lock())

    def forget(self, uid: str) -> None:
        """The claim's entries given back (written behind by the blocks' worker) and it forgotten. OSError."""
        with self._lock:
            k = self.kept.pop(uid, None)
            self.record.write(uid)
        if k is not None and k.held:
            self.blocks.release(k.entries, "release")
            log.info("IPAMClaim %s is gone: %s of network %s freed", k.ref, ", ".join(e.address for e in k.entries),
                     k.network)  # fmt: skip

    def name_claims(self, shown: list[dict[str, Any]]) -> None:
        """The IPAMClaims' entries of `ipam show`'s list named (namespace/name) where this node knows them, and
        the pod that keeps a deleted claim's address."""
        with self._lock:
            for doc in shown:
                k = self.kept.get(str(doc.get("containerID", "")).removeprefix(CLAIM_HOLDER))
                if k is not None:
                    doc["ipamClaim"] = k.ref
                    doc["pod"] = k.pod or None

    def _by_ref(self, ref: str) -> Kept | None:
        with self._lock:
            return next((k for k in self.kept.values() if k.ref == ref), None)

    # ------------------------------------------------------------------------------------------------ an ADD

    def take(self, pool: Pool, names: tuple[str, ...], ifname: str, ref: str, pod: tuple[str, str],
             container_id: str, *, create: bool = False) -> list[Claim]:  # fmt: skip
        """The addresses of claim `ref` (namespace/name) for a pod's interface on network pool.network (`names`:
        what spec.network may say of it), as the pod's uses of them (never given back by its DEL). DelegateError 7
        for a claim it may not use, 11 when it cannot be told now; nothing is taken then."""
        pod_name = pod[0].partition("/")[2]
        with self._busy_lock(ref):
            c = self._read(ref, create, names, ifname, pod_name)
            if c is None:
                kept = self._by_ref(ref)
                assert kept is not None, "_read answers None only for a claim this node recorded"
                entries = kept.entries
            else:
                self._check(c, pool.network, names, ifname, pod)
                entries = self._first(c, pool, pod_name) if not c.ips else self._known(c, pool, pod_name)
        return [Claim(e.block, e.network, e.address, self.node, container_id, ifname, pod[0], pod[1],
                      node_in_cluster=self.blocks.node_in_cluster, block=e.block, ipam_claim=e.ipam_claim)
                for e in entries]  # fmt: skip

    def _read(self, ref: str, create: bool, names: tuple[str, ...], ifname: str, pod_name: str) -> ClaimObject | None:
        """The claim (made first when `create` and missing); None: the API server is away and this node recorded
        its addresses."""
        ns, _, name = ref.partition("/")
        try:
            return self.api.get(ns, name)
        except Missing:
            if create:
                return self._create(ns, name, names, ifname, pod_name)
            stale = self._by_ref(ref)
            if stale is not None and not stale.held:  # seen here, gone now: nothing to serve from any more
                with contextlib.suppress(OSError):
                    self.forget(stale.key.rpartition("/")[2])
            raise DelegateError(E_INVALID_CONFIG, f"no IPAMClaim {ref}", "create it, or leave out "
                                "ipam-claim-reference") from None  # fmt: skip
        except ValueError as e:
            raise DelegateError(E_INVALID_CONFIG, f"IPAMClaim {ref} cannot be used: {e}") from None
        except Away as e:
            kept = self._by_ref(ref)
            if kept is None or not kept.entries:
                raise DelegateError(E_TRY_LATER, f"IPAMClaim {ref} cannot be read and this node has not seen it: "
                                    f"{e}", "nothing was taken") from None  # fmt: skip
            log.warning("IPAMClaim %s cannot be read (%s): its addresses as this node recorded them", ref, e)
            return None

    def _create(self, ns: str, name: str, names: tuple[str, ...], ifname: str, pod_name: str) -> ClaimObject:
        """The pod's own claim (IPAM_CLAIMS annotation), owned by the pod's controller (it goes with it); an
        error naming what failed."""
        try:
            pod = self.api.pod(ns, pod_name)
            owner = controller_ref(pod) if pod is not None else None
            if owner is None:
                raise DelegateError(E_INVALID_CONFIG, f"pod {ns}/{pod_name} has no controller to own IPAMClaim "
                                    f"{ns}/{name}", "netcomp creates claims for a controller's pods only")  # fmt: skip
            return self.api.create(ns, name, names[1] or names[0], ifname, owner)
        except Changed:  # made meanwhile (another ADD of the pod, or its tenant): the next try reads it
            raise DelegateError(E_TRY_LATER, f"IPAMClaim {ns}/{name} was made meanwhile", "nothing was taken") from None
        except (Away, Missing) as e:
            raise DelegateError(E_TRY_LATER, f"IPAMClaim {ns}/{name} cannot be created: {e}", "nothing was taken"
                                ) from None  # fmt: skip

    def _check(self, c: ClaimObject, network: str, names: tuple[str, ...], ifname: str, pod: tuple[str, str]) -> None:
        if c.network not in names:
            raise DelegateError(E_INVALID_CONFIG, f"IPAMClaim {c.ref} is of network {c.network!r}, not of "
                                f"{network!r}", "a claim holds an address of the network its spec names")  # fmt: skip
        if c.interface != ifname:
            raise DelegateError(E_INVALID_CONFIG, f"IPAMClaim {c.ref} is for interface {c.interface!r}, not "
                                f"{ifname!r}", "name the interface as the claim's spec.interface does")  # fmt: skip
        if c.deleting:
            raise DelegateError(E_INVALID_CONFIG, f"IPAMClaim {c.ref} is being deleted")
        pod_ns, _, pod_name = pod[0].partition("/")
        if c.owner_pod and c.owner_pod != pod_name:
            self._migration(c, pod_ns, pod_name)

    def _migration(self, c: ClaimObject, ns: str, name: str) -> None:
        """A pod naming a claim another running pod holds: only a pod of the same controller (a VM's launcher
        pods during a migration) may; anything else is refused naming the holder."""
        try:
            owner = self.api.pod(ns, c.owner_pod)
            if owner is None or not running(owner):
                return
            mine = self.api.pod(ns, name)
        except Away as e:
            raise DelegateError(E_TRY_LATER, f"IPAMClaim {c.ref}: pod {ns}/{c.owner_pod}, which holds it, cannot be "
                                f"read: {e}", "nothing was taken") from None  # fmt: skip
        theirs = controller_uid(owner)
        if not theirs or mine is None or controller_uid(mine) != theirs:
            raise DelegateError(E_INVALID_CONFIG, f"IPAMClaim {c.ref} is held by running pod {ns}/{c.owner_pod}, "
                                "which is not of this pod's controller",
                                "only a pod of the same controller (a migration) may use it too")  # fmt: skip

    def _first(self, c: ClaimObject, pool: Pool, pod_name: str) -> list[Claim]:
        """A claim with no status.ips: the addresses this node recorded for it (a crash came before the status),
        else new ones, marked as the claim's and recorded, then the status written."""
        kept = self.kept.get(c.uid)
        if kept is None or not kept.held or not kept.entries:
            if c.node and c.node != node_label(self.node):
                raise DelegateError(E_TRY_LATER, f"IPAMClaim {c.ref} is being given its address by node {c.node}",
                                    "nothing was taken")  # fmt: skip
            self.start_following()  # a mark whose answer is lost is this node's to take off again (unanswered)
            try:
                c = self.api.mark(c, self.node)  # on the version read: the lock two first ADDs share
            except Changed:
                raise DelegateError(E_TRY_LATER, f"IPAMClaim {c.ref} changed while read (another node may be "
                                    "giving it its address)", "nothing was taken") from None  # fmt: skip
            except (Away, Missing) as e:
                raise DelegateError(E_TRY_LATER, f"IPAMClaim {c.ref} cannot be marked: {e}", "nothing was taken"
                                    ) from None  # fmt: skip
            try:
                entries = self._allocate(c, pool)
            except DelegateError:
                with contextlib.suppress(Away, Missing, Changed):
                    self.api.mark(c, None)  # nothing taken: another node may give it its address
                raise
            kept = Kept(c.key, pool.network, c.interface, entries, held=True, owner=pod_name)
            try:
                self.keep(kept)
            except DelegateError:
                self.blocks.release(entries, "rollback")
                with contextlib.suppress(Away, Missing, Changed):
                    self.api.mark(c, None)
                raise
        faults.point("after-ipamclaim-recorded")
        self._publish(c, pool, kept, pod_name)
        return kept.entries

    def _allocate(self, c: ClaimObject, pool: Pool, exact: IPAddress | None = None) -> list[Claim]:
        holder = Holder(CLAIM_HOLDER + c.uid, c.interface)
        entries: list[Claim] = []
        try:
            for i, rs in enumerate(pool.sets):
                if exact is not None and (not rs or rs[0].subnet.version != exact.version):
                    continue
                entries.append(replace(self.blocks.claim(pool, i, holder, exact), ipam_claim=c.key))
        except BaseException:
            self.blocks.release(entries, "rollback")
            raise
        self.blocks.settle(entries)
        return entries

    def _publish(self, c: ClaimObject, pool: Pool, kept: Kept, pod_name: str) -> None:
        """The blocks' records written (another node checks them), then the claim's status."""
        if not self.blocks.write_now(kept.entries) and not self.blocks.worker.flush(self.timeout):
            raise DelegateError(E_TRY_LATER, f"IPAMClaim {c.ref}: the record of its address's block is not written "
                                "yet", "its address stays kept for it; try again")  # fmt: skip
        try:
            self.api.write_status(c, [cidr(e, pool) for e in kept.entries], pod_name)
        except (Away, Missing, Changed, ValueError) as e:  # ValueError: the claim, as written, edited meanwhile
            raise DelegateError(E_TRY_LATER, f"IPAMClaim {c.ref}: its status cannot be written: {e}",
                                "its address stays kept for it; try again") from None  # fmt: skip
        kept.status = True
        self.keep(kept)
        log.info("IPAMClaim %s holds %s of network %s", c.ref, ", ".join(e.address for e in kept.entries),
                 pool.network)  # fmt: skip

    def _known(self, c: ClaimObject, pool: Pool, pod_name: str) -> list[Claim]:
        """A claim with status.ips: each address checked against the block it lies in (this node's bookkeeping,
        or the block's record read by name), taken again for the claim when nothing holds it (its holder node
        gone), refused naming whoever else holds it. A claim that names other addresses, or another network,
        than those this node confirmed for it was edited by someone else: refused, and nothing of it taken or
        freed (pods of the claim use what netcomp gave it)."""
        old = self.kept.get(c.uid)
        said, gave = {str(ip.ip) for ip in c.ips}, {e.address for e in old.entries} if old is not None else set()
        if old is not None and old.status and (said != gave or old.network != pool.network):
            raise DelegateError(E_INVALID_CONFIG, f"IPAMClaim {c.ref} says {', '.join(sorted(said))} of network "
                                f"{pool.network!r}, but netcomp gave it {', '.join(sorted(gave))} of network "
                                f"{old.network!r}: edited by someone else",
                                "put its spec.network and status.ips back, or delete the claim")  # fmt: skip
        entries = []
        retaken = False
        for ip in c.ips:
            addr = ip.ip
            block = _block_of(pool, addr)
            if block is None:
                raise DelegateError(E_INVALID_CONFIG, f"IPAMClaim {c.ref}: status.ips has {ip}, not an address of "
                                    f"network {pool.network!r}'s pool ({pool.subnets()})")  # fmt: skip
            e = self._entry(c, pool, addr, block)
            if e is None:
                e = self._allocate(c, pool, addr)[0]
                retaken = True
            entries.append(e)
        # Held here: entries of this node's blocks, or lent to it (its own to give back when the claim goes).
        self.keep(Kept(c.key, pool.network, c.interface, entries, held=all(e.node == self.node for e in entries),
                       status=True))  # fmt: skip
        if old is not None and old.held:  # other addresses than it gave, never in a status: those go
            gone = [e for e in old.entries if (e.block, e.address) not in {(n.block, n.address) for n in entries}]
            self.blocks.release(gone, "release")
        if retaken and not self.blocks.write_now(entries):
            self.blocks.worker.flush(self.timeout)
            with contextlib.suppress(Away, Missing, Changed):
                c = self.api.mark(c, self.node)  # this node keeps its entry now: its deletion is this node's to see
        if c.owner_pod != pod_name:  # the pod that uses it now (a VM's next launcher pod, a migration's target)
            self._owners.submit(self._write_owner, c, pod_name)  # off the ADD's path: a stale one is read as gone
        return entries

    def let_go(self, uses: list[Claim]) -> None:
        """Pods' uses of claims' addresses given up (their DEL): off the DEL's path, each claim whose status still
        names that pod as its owner has ownerPod taken away once the pod is going (deleted, finished, or gone),
        so that the next pod naming the claim (a VM's next launcher pod) has no old owner to read. A pod whose
        sandbox is made again (not going) stays the owner."""
        for u in uses:
            if u.pod and u.pod_uid and u.ipam_claim.count("/") == 2:
                self._owners.submit(self._let_go, u)

    def _let_go(self, u: Claim) -> None:
        ns, name, uid = u.ipam_claim.split("/")
        pod_ns, _, pod_name = u.pod.partition("/")
        try:
            if going(self.api.pod(pod_ns, pod_name), u.pod_uid):
                self.api.clear_owner(ns, name, uid, pod_name)
        except (Away, Missing, Changed) as e:  # a later ADD reads that owner, as before
            log.debug("IPAMClaim %s/%s: ownerPod %s left (%s)", ns, name, pod_name, e)

    def _write_owner(self, c: ClaimObject, pod_name: str) -> None:
        try:
            self.api.write_status(c, [str(ip) for ip in c.ips], pod_name)
        except (Away, Missing, Changed, ValueError) as e:
            log.warning("IPAMClaim %s: ownerPod not written (%s); pod %s uses it", c.ref, e, pod_name)

    def _entry(self, c: ClaimObject, pool: Pool, addr: IPAddress, block: str) -> Claim | None:
        """The claim's entry of `addr` (None: nothing holds it). DelegateError naming another holder."""
        want = CLAIM_HOLDER + c.uid
        mine = Claim(block, pool.network, str(addr), self.node, want, c.interface, block=block, ipam_claim=c.key)
        here, who = self.blocks.entry_of(block, addr)
        if not here:
            try:
                rec = self.blocks.store.get(block)
            except StoreUnavailable as e:
                raise DelegateError(E_TRY_LATER, f"IPAMClaim {c.ref}: the block of {addr} cannot be read: {e}",
                                    "nothing was taken") from None  # fmt: skip
            if rec is not None and (rec.network != pool.network or rec.name != block or addr not in rec.net):
                raise DelegateError(E_INVALID_CONFIG, f"IPAMClaim {c.ref}: the object at {block}'s name is not "
                                    f"the block of {addr}", "it is not netcomp's: never trusted")  # fmt: skip
            doc = (rec.used.get(str(addr)) or rec.lent.get(str(addr))) if rec is not None else None
            if rec is None or doc is None:
                return None
            node = rec.node if str(addr) in rec.used else str(doc.get("node", ""))
            who = claim_of(rec, str(addr), doc, node)
            mine = replace(mine, node=node)
        if who is None:
            return None
        if who.container_id != want:
            raise DelegateError(E_INVALID_CONFIG, f"IPAMClaim {c.ref}: its status.ips has {addr}, which is held by "
                                f"{who.holder()}", "netcomp's blocks do not record it as the claim's")  # fmt: skip
        return mine

    def _rebuild(self, c: ClaimObject) -> None:
        """A claim whose file could not be read at start: its record made again from the entries of its
        status.ips that this node's blocks kept for it; or, with none, said to stay unread."""
        want = CLAIM_HOLDER + c.uid
        entries, ours = [], set()
        for pool in self.blocks.pools.values():
            for ip in c.ips:
                block = _block_of(pool, ip.ip)
                if block is None:
                    continue
                ours.add(ip.ip)
                who = self.blocks.entry_of(block, ip.ip)[1]
                if who is not None and who.container_id == want:
                    entries.append(replace(who, ipam_claim=c.key))
        if not entries or len(entries) != len(ours):  # not all its blocks listed yet: looked at again (recheck)
            if c.uid not in self.unbuilt:
                log.warning("IPAMClaim %s: its file here cannot be read: written again once this node's blocks show "
                            "its entries", c.ref)  # fmt: skip
            self.unbuilt[c.uid] = c
            return
        try:
            self.keep(Kept(c.key, entries[0].network, c.interface, entries, held=True, status=True))
        except DelegateError as e:
            log.error("IPAMClaim %s: its record cannot be written again: %s", c.ref, e.msg)
            return
        self.record.unread.discard(c.uid)
        self.unbuilt.pop(c.uid, None)
        self.blocks.kept_holders.discard(want)
        log.warning("IPAMClaim %s: its record, which could not be read, is written again from its blocks' (%s)",
                    c.ref, ", ".join(e.address for e in entries))  # fmt: skip

    # ------------------------------------------------------------------------------------------------ deletion

    def deleted(self, c: ClaimObject | None, uid: str) -> None:
        """The claim of `uid` is being deleted (c: as the watch shows it) or is gone (None): its addresses stay
        with the pod its status last named while that pod runs (freed once it is gone, recheck()), else they are
        freed now; the record is written first, then netcomp's finalizer taken off."""
        k = self.kept.get(uid)
        ref = c.ref if c is not None else (k.ref if k is not None else "")
        with self._busy_lock(ref):
            if uid in self.record.unread:  # what it holds is not known until its record is made again (_rebuild)
                log.warning("IPAMClaim %s is deleted: its file here cannot be read yet: its addresses and netcomp's "
                            "finalizer stay until it is written again", ref or uid)  # fmt: skip
                return
            k = self.kept.get(uid)
            if k is not None and k.held and not k.pod:
                owner = self._alive(c.namespace, c.owner_pod) if c is not None and c.owner_pod else None
                try:
                    if owner is not None:
                        k.pod = owner
                        self.keep(k)
                        log.info("IPAMClaim %s is deleted: its addresses stay pod %s's until it is gone", k.ref, owner)
                    else:
                        self.forget(uid)
                except (OSError, DelegateError) as e:
                    log.error("IPAMClaim %s: cannot record its deletion: %s", k.ref, e)
                    return  # the finalizer stays: the next list tries again
            elif k is not None and not k.held:
                with contextlib.suppress(OSError):
                    self.forget(uid)
            if c is not None and FINALIZER in c.finalizers and c.node == node_label(self.node):
                try:
                    self.api.mark(c, None)
                except (Away, Changed) as e:
                    log.warning("IPAMClaim %s: its finalizer stays for now: %s", c.ref, e)
                except Missing:
                    pass

    def _alive(self, namespace: str, name: str) -> str | None:
        """namespace/name of the pod when it exists and runs (None: gone or finished); one that cannot be read
        counts as alive."""
        try:
            pod = self.api.pod(namespace, name)
        except Away:
            return f"{namespace}/{name}"
        return f"{namespace}/{name}" if pod is not None and running(pod) else None

    def unanswered(self, c: ClaimObject) -> None:
        """A claim labelled with this node with netcomp's finalizer, no status.ips, no record here and no ADD of it
        in flight: a first ADD's mark whose answer was lost. Both taken off, on the version shown (an ADD that
        changed it since wins), so another node's ADD can give it its address; looked at again (recheck) later
        while an ADD of it runs here or the write fails."""
        if c.deleting or c.ips or FINALIZER not in c.finalizers or c.node != node_label(self.node):
            self.strays.pop(c.uid, None)
            return
        busy = self._busy_lock(c.ref)
        if not busy.acquire(blocking=False):
            self.strays[c.uid] = c  # an ADD of it runs here now: looked at once it is done
            return
        self.strays.pop(c.uid, None)
        try:
            k = self.kept.get(c.uid)
            if k is None or not k.entries:  # else given its address here, its status not written yet: _finish's
                self.api.mark(c, None)
                log.warning("IPAMClaim %s had this node's label and netcomp's finalizer and no address given here "
                            "(the answer to an ADD's write of them was lost): taken off", c.ref)  # fmt: skip
        except Missing:
            pass
        except (Away, Changed) as e:
            self.strays[c.uid] = c
            log.info("IPAMClaim %s: this node's label and finalizer not taken off yet: %s", c.ref, e)
        finally:
            busy.release()

    def recheck(self) -> None:
        """The addresses of deleted claims whose pods are gone now, freed; and the claims this node gave a first
        address whose status is not written (the API server away, or the daemon killed, between the two)
        finished; and the claims unanswered() left to look at again, read again first; and the files of claims
        that could not be read, written again once this node's blocks show their entries."""
        for c in list(self.unbuilt.values()):
            self._rebuild(c)
            if c.deleting and c.uid not in self.record.unread:  # its deletion waited for its record (deleted)
                self.deleted(c, c.uid)
        for uid, c in list(self.strays.items()):
            try:
                now: ClaimObject | None = self.api.get(c.namespace, c.name)
            except (Missing, ValueError):
                now = None
            except Away:
                continue
            if now is None or now.uid != uid:
                self.strays.pop(uid, None)
            else:
                self.unanswered(now)
        for uid, k in list(self.kept.items()):
            ns, _, name = k.pod.partition("/")
            if k.pod and self._alive(ns, name) is None:
                with contextlib.suppress(OSError):
                    self.forget(uid)
            elif k.held and not k.status and not k.pod:
                self._finish(uid, k)

    def _finish(self, uid: str, k: Kept) -> None:
        """A claim given its first address here and no status yet: its status written, unless an ADD of it runs
        now (that ADD writes it), the claim is gone (its entries given back) or its status says other addresses
        (those this node kept go, as a later ADD would decide)."""
        busy = self._busy_lock(k.ref)
        if not busy.acquire(blocking=False):
            return
        try:
            ns, _, name = k.ref.partition("/")
            pool = self.blocks.pools.get(k.network)
            try:
                c = self.api.get(ns, name)
            except Missing:
                c = None
            except (Away, ValueError):
                return  # tried again at the next look
            if c is not None and c.uid == uid and c.deleting:
                return  # the claim's deletion is the follower's to handle
            if c is None or c.uid != uid or c.ips:
                mine = c is not None and c.uid == uid and {str(ip.ip) for ip in c.ips} == {e.address for e in k.entries}
                if mine:
                    k.status = True
                    self.keep(k)
                else:
                    self.forget(uid)
                return
            if pool is not None:
                self._publish(c, pool, k, k.owner or c.owner_pod)
        except (DelegateError, OSError) as e:
            log.warning("IPAMClaim %s: its status is not written yet: %s", k.ref, getattr(e, "msg", e))
        finally:
            busy.release()

    def listed(self, claims: list[ClaimObject]) -> None:
        """A whole list of the claims labelled with this node: those being deleted, and those this node keeps
        entries for that are not there and not found by name either (deleted while it was away), handled."""
        by_uid = {c.uid: c for c in claims}
        for c in claims:
            if c.uid in self.record.unread:
                self._rebuild(c)
            if c.deleting:
                self.deleted(c, c.uid)
            else:
                self.unanswered(c)
        for uid, k in list(self.kept.items()):
            if not k.held or k.pod or uid in by_uid:
                continue
            ns, _, rest = k.key.partition("/")
            try:
                now = self.api.get(ns, rest.partition("/")[0])
            except Missing:
                self.deleted(None, uid)
                continue
            except (Away, ValueError):
                continue
            if now.uid != uid:
                self.deleted(None, uid)  # another claim of that name: this one is gone
            elif now.deleting:
                self.deleted(now, uid)
