"""Fixtures of the unit tests: the shims (test_shim.py, test_shim_props.py; see shimlab.py), what netcomp.foreign
ignores (hostile.py), and the node of the device tests with its kubelet's PodResources API (tests/lab/devicenode.py,
tests/lab/podresources.py). Nothing here runs unless a test asks for it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab.devicenode import DeviceNode
from tests.lab.hostile import Ignored, counting
from tests.lab.podresources import PodResourcesServer, podresources
from tests.lab.shimlab import SHIMS, Shim, build_all, pick


@pytest.fixture(scope="session")
def shims(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Shim]:
    """Every shim, built (the C ones: a compiler warning fails the build) or installed once per session."""
    return build_all(tmp_path_factory.mktemp("shims"))


@pytest.fixture(params=SHIMS)
def shim(request: pytest.FixtureRequest, shims: dict[str, Shim]) -> Shim:
    return pick(shims, request.param)


@pytest.fixture
def sockdir() -> Iterator[Path]:
    """A short directory for sockets (a unix socket's path is at most 107 bytes; pytest's tmp_path can be
    longer), removed after the test."""
    d = Path(tempfile.mkdtemp(prefix="ncs-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def ignored() -> Iterator[Ignored]:
    """What netcomp.foreign ignores during the test, counted by kind (tests/lab/hostile.py)."""
    with counting() as counter:
        yield counter


@pytest.fixture
def device_node(tmp_path: Path) -> DeviceNode:
    """A node's Delegator with stand-in plugins, its kubelet's socket and checkpoint in tmp_path (devicenode.py)."""
    return DeviceNode(tmp_path)


@pytest.fixture
def pod_resources(device_node: DeviceNode) -> Iterator[PodResourcesServer]:
    """The kubelet's PodResources API of the device node: a stand-in whose answers the test sets."""
    with podresources(device_node.sock) as state:
        yield state
