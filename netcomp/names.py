"""Keeps every name rule in one place (as libcni's pkg/utils/utils.go does): what a network, a plugin, a container,
an interface (in a request, in an intent), a Kubernetes label or a device may be called."""

from __future__ import annotations

import re
from typing import TypeGuard

IFNAMSIZ = 15  # Linux interface names: 15 bytes plus NUL

# CNI spec: a network name, and a container ID, "must start with an alphanumeric character, optionally followed by
# any combination of one or more alphanumeric characters, underscore, dot or hyphen". libcni holds plugin types
# (file names in the plugin dirs) to the same. Always matched whole (fullmatch: `$` would let "id\n" through).
CNI_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")

# A DNS-1123 label: a Kubernetes namespace's name, a network's (Multus holds annotation names to it too).
DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL_RE = re.compile(DNS_LABEL)


def is_dns_label(value: object) -> TypeGuard[str]:
    """A DNS-1123 label, as Kubernetes holds names and namespaces to it: at most 63 characters."""
    return isinstance(value, str) and len(value) <= 63 and DNS_LABEL_RE.fullmatch(value) is not None


# An interface name in an intent (hostDevice, a prefix): what the tools that make links accept without quoting.
INTENT_IFNAME = r"[A-Za-z0-9_][A-Za-z0-9_.\-]*"

# A PCI address, domain:bus:device.function, as sysfs writes it.
PCI_ADDRESS = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
PCI = re.compile(PCI_ADDRESS)


def is_cni_name(name: str) -> bool:
    return CNI_NAME.fullmatch(name) is not None


def ifname_problem(name: str) -> str | None:
    """What is wrong with an interface name a runtime or a pod gives (None: nothing): Linux's rules, and printable
    ASCII only (the kernel takes control characters and non-ASCII, but they break tools and logs)."""
    plain = all("!" <= c <= "~" and c not in "/:" for c in name)
    if not name or len(name) > IFNAMSIZ or name in (".", "..") or not plain:
        return "1 to 15 characters of printable ASCII; no space, '/' or ':'; not '.' or '..'"
    return None


# Kubernetes labels (apimachinery's pkg/util/validation/validation.go): a key is a qualified name, an optional DNS
# subdomain prefix and '/', then a name of at most 63 characters; a value is such a name or empty.
LABEL_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
DNS_SUBDOMAIN_RE = re.compile(rf"{DNS_LABEL}(\.{DNS_LABEL})*")


def is_dns_subdomain(value: object) -> TypeGuard[str]:
    """A DNS-1123 subdomain, as Kubernetes holds most objects' names to it: at most 253 characters."""
    return isinstance(value, str) and len(value) <= 253 and DNS_SUBDOMAIN_RE.fullmatch(value) is not None


def quoted(text: str, limit: int = 80) -> str:
    """What someone wrote, quoted in a message: at most `limit` characters of it, escaped, and the escaped form
    at most twice that (a character outside the BMP escapes to ten)."""
    shown = repr(text if len(text) <= limit else text[:limit] + "...")
    return shown if len(shown) <= 2 * limit else shown[: 2 * limit] + "..."


def label_key_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not DNS_SUBDOMAIN_RE.fullmatch(prefix)):
        return f"label key {quoted(key)}: its prefix is not a DNS subdomain"
    if len(name) > 63 or not LABEL_NAME_RE.fullmatch(name):
        return (
            f"label key {quoted(key)}: the name must be 1-63 characters, alphanumeric at both ends, with '-', '_', '.'"
        )
    return None


def label_value_problem(value: str) -> str | None:
    if value and (len(value) > 63 or not LABEL_NAME_RE.fullmatch(value)):
        return f"label value {quoted(value)}: at most 63 characters, alphanumeric at both ends, with '-', '_', '.'"
    return None


# A device ID a device plugin gave a pod goes into plugin configs (deviceID, pciBusID) and file names
# (device-info). It is a PCI address (VFs, vDPA devices on VFs), or a kernel name as /sys/bus/<bus>/devices lists
# it (a Scalable Function: `mlx5_core.sf.2`); an ID with ':' must be a PCI address, so a mistyped one is refused.
DEVICE_NAME_MAX = 64
DEVICE_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.\-]{{0,{DEVICE_NAME_MAX - 1}}}")
# sysfs writes a PCI domain of 0x10000 and up (behind an Intel VMD) with more than four digits.
DEVICE_PCI = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


def device_id_problem(dev: str) -> str | None:
    """What is wrong with a device ID from a device plugin (None: nothing), quoting it (shortened, escaped)."""
    if DEVICE_PCI.fullmatch(dev) or (":" not in dev and DEVICE_NAME.fullmatch(dev)):
        return None
    return (
        f"{quoted(dev, DEVICE_NAME_MAX)} is neither a PCI address (like 0000:3b:02.1) nor a device name "
        f"(1-{DEVICE_NAME_MAX} letters, digits, '_', '.' or '-', no ':')"
    )
