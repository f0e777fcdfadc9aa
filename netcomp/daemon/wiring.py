"""The daemon's parts built from its settings (netcomp.yaml, or the last good ones while it is broken): the
compiler's pipeline, the plugins' runner, the cluster, the devices, the Delegator with the host's side of the node
plugged in, the server's limits, and the runtime's entry for the shim. The Daemon (daemon.py) builds them once,
and some again when netcomp.yaml changes; what each part does is its own module's."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netcomp import report
from netcomp.cni.invoke import Exec, Runner
from netcomp.cni.spec import DEFAULT_VERSION
from netcomp.compiler.pipeline import Pipeline
from netcomp.daemon.server.connections import Limits
from netcomp.daemon.tenantids import TenantIds
from netcomp.delegate.delegator import Delegator
from netcomp.errors import Diagnostic, IntentError
from netcomp.fsutil import atomic_write, read_bounded
from netcomp.host import netns, ownedlinks, vfpools
from netcomp.ipam.store import AddressAllocator
from netcomp.kubelet.podresources import Kubelet
from netcomp.metrics import Metrics
from netcomp.pods import naming
from netcomp.pods.devices import Devices
from netcomp.policy.enforcer import Enforcer
from netcomp.records.files import Records
from netcomp.settings import KubeSettings, Settings

if TYPE_CHECKING:
    from netcomp.cluster.intents import Cluster

log = logging.getLogger("netcomp.daemon")
RUNTIME_CONF = "00-netcomp.conflist"


def read_settings(
    load: Callable[[], Settings], last_good: Settings | None, instead: str
) -> tuple[Settings, tuple[Diagnostic, ...]]:
    """netcomp.yaml as `load` reads it; when it is broken, `last_good` and the diagnostics of why, logged with
    what is done `instead`. IntentError when it is broken and there is nothing to run with."""
    try:
        return load(), ()
    except IntentError as e:
        if last_good is None:
            raise
        log.error("netcomp.yaml is broken; %s:\n%s", instead, report.format_all(e.diagnostics))
        return last_good, tuple(e.diagnostics)


# The capabilities of CNI's CONVENTIONS.md: libcni hands the shim a runtimeConfig only for those its entry declares,
# and the daemon hands each on to the delegates that declare it.
CAPABILITIES = ("portMappings", "ipRanges", "bandwidth", "dns", "ips", "mac", "infinibandGUID", "deviceID", "aliases")


def runtime_config(settings: Settings) -> bytes:
    """The runtime's entry: the shim as the node's CNI network, pointing at our socket."""
    plugin = {"type": "netcomp", "socket": settings.socket, "capabilities": dict.fromkeys(CAPABILITIES, True)}
    conf = {"cniVersion": DEFAULT_VERSION, "name": "netcomp", "plugins": [plugin]}
    return (json.dumps(conf, indent=2) + "\n").encode()


def write_runtime_config(settings: Settings) -> None:
    """The runtime's entry written to its conf dir (with writeRuntimeConfig), only when it differs."""
    path = Path(settings.runtimeConfDir) / RUNTIME_CONF
    if not settings.writeRuntimeConfig:
        return
    data = runtime_config(settings)
    try:
        if not path.exists() or read_bounded(path, 1 << 20) != data:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, data)
            log.info("wrote %s", path)
    except OSError as e:
        log.error("cannot write %s: %s", path, e.strerror)


def marker(cache_dir: str) -> str:
    """What the delegates of a daemon with this cache dir carry in their environment (cni.invoke.kill_marked)."""
    return hashlib.sha256(os.path.realpath(cache_dir).encode()).hexdigest()[:16]


def pipeline(settings: Settings, tenants: TenantIds) -> Pipeline:
    """The compiler's pipeline, claiming TenantConfig ids through the daemon's store."""
    p = Pipeline(settings, offline=False, fork=True)
    p.claim_ids, p.claims_state = tenants.claim, tenants.state
    return p


def runner(settings: Settings, exec_: Exec, metrics: Metrics) -> Runner:
    def observe(plugin: str, verb: str, seconds: float, ok: bool) -> None:
        metrics.delegate.labels(plugin, verb).observe(seconds)
        if not ok:
            metrics.delegate_failures.labels(plugin, verb).inc()

    mark = marker(settings.cacheDir)
    return Runner(settings.pluginDirs, exec_=exec_, observe=observe, timeout=settings.pluginTimeout, marker=mark)


def limits(s: Settings) -> Limits:
    return Limits(
        allowed_uids=set(s.allowedUids),
        max_in_flight=s.maxInFlight,
        max_queued=s.maxQueued,
        queue_timeout=s.queueTimeout,
        max_connections=s.maxConnections,
        max_per_peer=s.maxConnectionsPerPeer,
        header_timeout=s.headerTimeout,
        max_body=s.maxRequestBytes,
    )


def cluster(settings: Settings, metrics: Metrics, cache: Records) -> Cluster | None:
    if settings.kubernetes is None:
        return None
    from netcomp.cluster.intents import Cluster  # the kubernetes client: only for a node with a cluster

    return Cluster(settings.kubernetes, Path(settings.clusterIntentDir), metrics, settings.nodeName, cache)


def devices(settings: Settings, pools: Callable[[], set[str]]) -> Devices:
    """The devices device plugins give pods (a kubelet client that connects on first use); `pools`: the
    sriovPools' names now."""
    k = settings.kubelet
    return Devices(Kubelet(k.podResourcesSocket, k.checkpoint, k.timeout), pools, settings.deviceInfoDir)


def check_pools(settings: Settings, devices: Devices) -> None:
    """A resource that is both one of sriovPools and a device plugin's: two allocators of the same VFs. Its
    ADDs are refused (devices.py); said once, at start and on reload."""
    both = set(settings.sriovPools) & devices.kubelet.registered()
    msg = "sriovPools: %s is also a device plugin's resource the kubelet allocates (%s): its networks are refused "
    for name in sorted(both):
        log.error(msg + "until the pool is removed from netcomp.yaml", name, settings.kubelet.checkpoint)


def enforcer(
    cluster: Cluster | None, records: Records, kube: KubeSettings | None, networks: Callable[[], Mapping[str, Any]]
) -> Enforcer | None:
    """MultiNetworkPolicy's enforcement, on a node with a cluster (kubernetes.policies); its thread is started
    with the daemon's others (Daemon.start). Of other pods, only their addresses on the node's `networks` are kept."""
    if cluster is None or cluster.policies is None or kube is None:
        return None
    writes = cluster.metrics.policy_writes
    enforcer = Enforcer(cluster.policies, records, cluster.pods.policy_info, cluster.pods, timeout=kube.timeout,
                        observe=lambda outcome, seconds: writes.labels(outcome).observe(seconds),
                        active=cluster.policies.active, known=cluster.policies.known.wait)  # fmt: skip
    cluster.policies.on_change = enforcer.changed
    cluster.policies.served = lambda: {naming.display_name(n, conf) for n, conf in networks().items()}
    return enforcer


def delegator(
    current: Callable[[], Settings],
    runner: Runner,
    cache: Records,
    networks: Callable[[], Mapping[str, dict[str, Any]]],
    cluster: Cluster | None,
    addresses: AddressAllocator | None,
    link_netns: str | None,
) -> Delegator:
    """The Delegator, with the node's side plugged in: host links and the namespaces never given to a container
    in `link_netns` (None: the daemon's own), SR-IOV pools and the default network from the settings `current`
    returns (they change on reload)."""

    def vf_pool(resource: str) -> list[str]:
        spec = current().sriovPools[resource]  # KeyError: no such pool (the delegator says so)
        return vfpools.pool(Path(current().sysfsRoot), spec.pfNames, spec.drivers)

    host_netns, host_unsure = netns.host_namespaces([f"/var/run/netns/{link_netns}"] if link_netns else [])
    if host_unsure:
        log.error("%s: every ADD is refused until netcomp can tell the host's namespace", host_unsure)
    return Delegator(
        runner,
        cache,
        networks,
        lambda: current().defaultNetwork,
        host_link=lambda link: ownedlinks.ensure(link, link_netns),
        vf_pool=vf_pool,
        owned_links=lambda: ownedlinks.owned(link_netns),
        remove_link=lambda name: ownedlinks.remove(name, link_netns),
        pods=cluster.pods if cluster is not None else None,
        policies=enforcer(cluster, cache, current().kubernetes, networks),
        addresses=addresses,
        devices=devices(current(), lambda: set(current().sriovPools)),
        home_netns=f"/var/run/netns/{link_netns}" if link_netns else "/proc/self/ns/net",
        host_netns=host_netns,
        host_unsure=host_unsure,
    )
