"""Messages declared from a table (netcomp/kubelet/protomsg.py) encode as protoc's classes would: the bytes are
checked against the protobuf wire format written out by hand, so a wrong field number or type fails here."""

import pytest

from netcomp.kubelet.protomsg import messages

TABLE = {
    "Outer": [("name", 1, "string"), ("inner", 2, "repeated Inner"), ("notes", 3, "map<string, string>")],
    "Inner": [("ids", 2, "repeated string"), ("flag", 3, "bool"), ("n", 4, "int64")],
}


def test_wire_bytes() -> None:
    m = messages("t.v1", TABLE)
    msg = m["Outer"](name="p", inner=[m["Inner"](ids=["a", "b"], flag=True, n=300)], notes={"k": "v"})
    data = msg.SerializeToString(deterministic=True)
    inner = b"\x12\x01a" + b"\x12\x01b" + b"\x18\x01" + b"\x20\xac\x02"  # field 2 twice, 3 varint, 4 varint 300
    notes = b"\x0a\x01k" + b"\x12\x01v"
    assert data == b"\x0a\x01p" + b"\x12" + bytes([len(inner)]) + inner + b"\x1a" + bytes([len(notes)]) + notes
    back = m["Outer"].FromString(data)
    assert list(back.inner[0].ids) == ["a", "b"] and back.notes["k"] == "v" and back.inner[0].n == 300


def test_unknown_type_is_refused() -> None:
    with pytest.raises(ValueError, match=r"Outer\.x: unknown type 'Missing'"):
        messages("t.v2", {"Outer": [("x", 1, "Missing")]})


def test_two_tables_with_one_message_name() -> None:
    a = messages("same", {"M": [("x", 1, "string")]})
    b = messages("same", {"M": [("y", 1, "int64")]})
    assert a["M"](x="1").SerializeToString() == b"\x0a\x011"
    assert b["M"](y=1).SerializeToString() == b"\x08\x01"
