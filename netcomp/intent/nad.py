"""Multus's NetworkAttachmentDefinition (k8s.cni.cncf.io/v1): spec.config is inline CNI JSON, used as a static
network named after the object: `namespace.name` for a definition in a namespace (as every one from a cluster
is), so that two namespaces' definitions of one name are two networks; plain `name` for one written without."""

from __future__ import annotations

from netcomp.cni import spec as cnispec
from netcomp.errors import Diagnostic
from netcomp.intent.compat import Collector, mapping, metadata, unknown_top, validate
from netcomp.intent.intent import Intent
from netcomp.intent.source import Document, PathKey
from netcomp.names import DNS_LABEL_RE

RESOURCE_NAME = "k8s.v1.cni.cncf.io/resourceName"  # the device plugin resource its plugins take a device of
NAD_FIELDMAP: dict[PathKey, PathKey] = {
    ("metadata",): ("metadata",),
    ("metadata", "name"): ("metadata", "name"),
    ("spec",): ("spec", "config"),
    ("spec", "resourceName"): ("metadata", "annotations", RESOURCE_NAME),
}


def parse(doc: Document) -> tuple[Intent | None, list[Diagnostic]]:
    """A NetworkAttachmentDefinition as a static network (see the module's docstring)."""
    c = Collector(doc)
    data = doc.data
    unknown_top(c, data)
    meta = metadata(c, data)
    spec = mapping(c, data.get("spec"), ("spec",), required=False) or {}
    if meta is None:
        return None, c.diags
    for k in spec:
        if k != "config":
            c.warn(f"spec.{k}: unknown key ignored (the API server would prune it)", ("spec", k))
    annotations = meta.get("annotations") or {}
    resource = annotations.get(RESOURCE_NAME) if isinstance(annotations, dict) else None
    raw = spec.get("config")
    if not raw:
        c.error(
            "spec.config is empty: netcomp needs the CNI configuration inline (Multus's lookup of a file by "
            "network name is not supported; use a static Network with networkID)",
            ("spec", "config") if "config" in spec else ("spec",),  # the empty value, or where it is missing
            key=True,
        )
        return None, c.diags
    if not isinstance(raw, str):
        c.error("spec.config must be a string of CNI JSON", ("spec", "config"))
        return None, c.diags
    try:
        conflist = cnispec.to_conflist(cnispec.parse_json(raw.encode()))
    except cnispec.ConfigProblem as p:
        where = f" (line {p.line}, column {p.column} of the JSON)" if p.line else ""
        c.error(f"spec.config: {p.message}{where}", ("spec", "config"))
        return None, c.diags
    problems = cnispec.verify_conflist(conflist, check_name=False)
    for prob in problems:
        c.error(f"spec.config: {prob}", ("spec", "config"))
    name = meta.get("name")
    namespace = meta.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not DNS_LABEL_RE.fullmatch(namespace)):
        c.error(
            "metadata.namespace must be a namespace's name (a DNS-1123 label: lower case letters, digits and '-')",
            ("metadata", "namespace"),
        )
    spec_out: dict[str, object] = {"type": "static", "networkID": str(name)}
    if resource is not None:
        spec_out["resourceName"] = resource  # the pod's device of it goes to the plugins (delegate/devices)
    native = {"apiVersion": "netcomp.io/v1", "kind": "Network", "metadata": {"name": name}, "spec": spec_out}
    if c.failed:
        return None, c.diags
    return validate(c, native, NAD_FIELDMAP, "k8s.cni.cncf.io/v1 NetworkAttachmentDefinition", conflist, namespace)
