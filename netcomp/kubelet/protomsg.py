"""Declares protocol buffer messages from a table, for the kubelet's gRPC APIs (PodResources v1) and the tests'
device plugin: protobuf builds the classes at run time, so no protoc output is kept and no .proto file is read.
A table maps each message name to its fields, `(name, number, type)`, the type as a .proto writes it: a scalar,
a message of the table, `repeated <type>`, or `map<string, string>`; the numbers are the upstream wire format."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Table = Mapping[str, Sequence[tuple[str, int, str]]]

# Scalar types by their .proto name; FieldDescriptorProto calls each TYPE_<NAME>.
_SCALARS = ("string", "bool", "int32", "int64", "uint32", "uint64", "bytes")


def messages(package: str, table: Table, file_name: str = "") -> dict[str, Any]:
    """The message classes of `table` in proto package `package`, by name. ValueError for a type the table
    does not declare. A pool of their own: two tables may declare messages of one name."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name=file_name or f"netcomp/{package}.proto", package=package, syntax="proto3"
    )
    for name, fields in table.items():
        msg = proto.message_type.add(name=name)
        for fname, number, ftype in fields:
            base = ftype.removeprefix("repeated ")
            label = f.LABEL_OPTIONAL if base == ftype else f.LABEL_REPEATED
            kind: dict[str, Any]
            if ftype.startswith("map<"):  # a repeated message of key and value, as protoc declares it
                key, value = (t.strip() for t in ftype[4:-1].split(","))
                entry = msg.nested_type.add(name=_entry_name(fname))
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=_scalar(f, key), label=f.LABEL_OPTIONAL)
                entry.field.add(name="value", number=2, type=_scalar(f, value), label=f.LABEL_OPTIONAL)
                label, kind = f.LABEL_REPEATED, {"type": f.TYPE_MESSAGE, "type_name": f".{package}.{name}.{entry.name}"}
            elif base in _SCALARS:
                kind = {"type": _scalar(f, base)}
            elif base in table:
                kind = {"type": f.TYPE_MESSAGE, "type_name": f".{package}.{base}"}
            else:
                raise ValueError(f"{name}.{fname}: unknown type {base!r}")
            msg.field.add(name=fname, number=number, label=label, **kind)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}")) for name in table}


def _scalar(f: Any, name: str) -> Any:
    if name not in _SCALARS:
        raise ValueError(f"unknown scalar type {name!r}")
    return getattr(f, f"TYPE_{name.upper()}")


def _entry_name(field_name: str) -> str:
    """protoc's name for a map field's entry message: the field name in CamelCase, then `Entry`."""
    return "".join(part[:1].upper() + part[1:] for part in field_name.split("_")) + "Entry"
