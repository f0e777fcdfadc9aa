"""The decoders of the kubelet's side of a node, fed random and adversarial input: the device manager's checkpoint
(podresources.parse_checkpoint), a device plugin's device-info file (devinfo.parse), and device IDs
(names.device_id_problem). Nothing escapes but ValueError (the checkpoint: "not the kubelet's"; device-info:
treated as missing); what they return has the promised types; the largest input the readers accept costs bounded
memory."""

from __future__ import annotations

import contextlib
import json
import random
import tracemalloc
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from netcomp.kubelet import devinfo
from netcomp.kubelet.podresources import MAX_CHECKPOINT, PodDevices, _collect, parse_checkpoint
from netcomp.names import device_id_problem

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=40,
)
ids = st.text(max_size=80) | st.sampled_from(["0000:3b:02.0", "../../etc/passwd", "a\nb", "mlx5_core.sf.2"])
entries = st.fixed_dictionaries(
    {"PodUID": st.text(max_size=8) | json_values, "ResourceName": st.text(max_size=8) | json_values},
    optional={"DeviceIDs": st.lists(ids, max_size=4) | st.dictionaries(st.text(max_size=3), json_values) | json_values},
)
checkpoints = st.fixed_dictionaries(
    {},
    optional={
        "Data": st.fixed_dictionaries(
            {},
            optional={
                "PodDeviceEntries": st.lists(entries, max_size=4) | json_values,
                "RegisteredDevices": st.dictionaries(st.text(max_size=8), json_values) | json_values,
            },
        )
        | json_values
    },
)


def _checkpoint_or_value_error(data: bytes) -> None:
    try:
        got, registered = parse_checkpoint(data)
    except ValueError:
        return
    assert all(isinstance(r, str) for r in registered)
    for uid, resource, devs in got:
        assert isinstance(uid, str) and isinstance(resource, str) and all(isinstance(d, str) for d in devs)
    pod = _collect([(r, d) for _, r, d in got], "checkpoint")
    _check(pod)


def _check(pod: PodDevices) -> None:
    """What is handed out is a device ID: a resource with any other is marked bad."""
    for resource, devs in pod.devices.items():
        if resource not in pod.bad:
            assert all(device_id_problem(d) is None for d in devs)
            assert all("/" not in d and d.isprintable() and len(d) <= 64 for d in devs)


@settings(max_examples=400, deadline=None)
@given(checkpoints)
def test_a_checkpoint_decodes_or_is_refused(doc: Any) -> None:
    _checkpoint_or_value_error(json.dumps(doc).encode())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_as_a_checkpoint(data: bytes) -> None:
    _checkpoint_or_value_error(data)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({}, optional={"type": json_values, "version": json_values, "pci": json_values}))
def test_a_device_info_file_decodes_or_is_refused(doc: Any) -> None:
    try:
        info = devinfo.parse(json.dumps(doc).encode())
    except ValueError:
        return
    assert isinstance(info["type"], str) and isinstance(info.get("version", ""), str)


@settings(max_examples=500, deadline=None)
@given(ids)
@example("0" * 25 + "\x1f" * 4 + "\U00012544" * 35)  # escapes to ten characters each: the message stays short
def test_a_device_id_is_a_pci_address_or_a_name(dev: str) -> None:
    why = device_id_problem(dev)
    if why is None:
        assert "/" not in dev and dev.isascii() and dev.isprintable() and 0 < len(dev) <= 64
    else:
        assert "\n" not in why and len(why) < 300


def _adversarial(rng: random.Random, size: int) -> list[bytes]:
    """Inputs of about `size` bytes: deep nesting of each bracket, one huge string, many tiny entries, many
    device IDs, random bytes."""
    deep = size // 2
    entry = json.dumps({"PodUID": "u", "ResourceName": "r", "DeviceIDs": ["0000:3b:02.0"]}) + ","
    n_entries = size // len(entry)
    return [
        b"[" * deep + b"]" * deep,
        b'{"a":' * (size // 6) + b"1" + b"}" * (size // 6),
        b'{"Data": {"PodDeviceEntries": [' + b"[" * deep,  # cut short
        json.dumps({"Data": {"RegisteredDevices": {"r": ["x" * (size - 64)]}}}).encode(),
        ('{"Data": {"PodDeviceEntries": [' + entry * (n_entries - 1) + entry[:-1] + "]}}").encode(),
        json.dumps(
            {"Data": {"PodDeviceEntries": [{"PodUID": "u", "ResourceName": "r", "DeviceIDs": ["a"] * (size // 6)}]}}
        ).encode(),
        bytes(rng.getrandbits(8) for _ in range(4096)),
    ]


def test_the_largest_adversarial_inputs_cost_bounded_memory() -> None:
    """Adversarial shapes at 1 MiB of checkpoint (its readers' bound is 16; the cost is linear in the size, and
    1 MiB keeps tracemalloc's run short) and 64 KiB of device-info (the bound): decoded or refused, never a
    RecursionError, and the Python heap grows by a bounded multiple of the input."""
    rng = random.Random(20261127)
    for size, decode in (
        (MAX_CHECKPOINT // 16, _checkpoint_or_value_error),
        (devinfo.MAX_FILE, _devinfo_or_value_error),
    ):
        for data in _adversarial(rng, size):
            assert len(data) <= size + 64
            tracemalloc.start()
            try:
                decode(data)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert peak < 40 * size + (1 << 20), (len(data), peak)


def _devinfo_or_value_error(data: bytes) -> None:
    with contextlib.suppress(ValueError):
        devinfo.parse(data)


def test_a_pci_address_of_a_domain_beyond_ffff_is_a_device_id() -> None:
    """sysfs writes the PCI domains behind an Intel VMD (0x10000 and up) with five digits or more."""
    from netcomp.names import device_id_problem

    assert device_id_problem("10000:01:00.1") is None and device_id_problem("0000:3b:02.1") is None
    assert device_id_problem("123456789:01:00.1") is not None
