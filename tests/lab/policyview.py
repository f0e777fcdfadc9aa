"""A plain in-memory cluster for the policy resolver's unit tests: the View that policy/resolve.py reads the
cluster through, over lists. It stands in for no server: what the daemon's own view holds is tested against the
real API server in the integration tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from netcomp.policy.mnp import Policy
from netcomp.policy.resolve import PodInfo


@dataclass
class Cluster:
    policies_: list[Policy] = field(default_factory=list)
    spaces: dict[str, dict[str, str]] = field(default_factory=dict)
    pods_: list[PodInfo] = field(default_factory=list)

    def policies(self, namespace: str) -> Iterable[Policy]:
        return [p for p in self.policies_ if p.namespace == namespace]

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self.spaces.get(namespace)

    def namespaces(self) -> Iterable[str]:
        return sorted(self.spaces)

    def pods(self, namespace: str) -> Iterable[PodInfo]:
        return [p for p in self.pods_ if p.namespace == namespace]

    def pod(self, namespace: str, name: str) -> PodInfo | None:
        return next((p for p in self.pods(namespace) if p.name == name), None)

    def every_policy(self) -> Iterable[Policy]:
        return list(self.policies_)

    def serve(self, networks: Iterable[str]) -> None:
        pass
