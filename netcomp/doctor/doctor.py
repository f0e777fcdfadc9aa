"""Runs every check of a node, in the order an operator bringing one up meets them (docs/operations.md says what
each means)."""

from __future__ import annotations

from netcomp.doctor import apiserver, local, node
from netcomp.doctor.checks import Check
from netcomp.errors import HostError
from netcomp.host import probe
from netcomp.settings import Settings


def run(settings: Settings, *, rbac_file: str | None = None) -> list[Check]:
    """The checks of this node with these settings; none needs the daemon but its own (networks are its files)."""
    checks = [local.daemon(settings)]
    nets, found = node.served(settings)
    checks.append(found)
    checks += node.kernel(nets)
    try:
        links = probe.link_kinds()
    except HostError:
        checks += node.no_links(nets)
    else:
        checks += node.devices(nets, links) + node.host_links(nets, links)
    checks += node.plugins(nets, settings)
    checks += node.nftables(settings)
    checks += local.sriov_checks(nets, settings)
    checks.append(local.runtime(settings))
    checks += apiserver.cluster(settings, rbac_file)
    return checks
