"""Read the opset imports of a serialized ONNX model without the ``onnx`` package (which the
enclave does not install): a minimal, bounded protobuf reader of ``ModelProto.opset_import``
(field 8). A helper of the plug-in toolkit, beside the interface, so that plug-ins share it
without importing one another."""

from __future__ import annotations

__all__ = ["read_opsets", "read_varint"]


def read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The protobuf varint at ``pos`` and the position after it; ``ValueError`` when it is
    truncated or longer than 64 bits."""
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, bytes | int]]:
    """Top-level (field, wire type, value) of a protobuf message."""
    out: list[tuple[int, int, bytes | int]] = []
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(data, pos)
            out.append((field, wire, value))
        elif wire == 2:
            length, pos = read_varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated length-delimited field")
            out.append((field, wire, data[pos:pos + length]))
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def read_opsets(model_bytes: bytes) -> dict[str, int]:
    """``{domain: version}`` from a serialized ONNX ModelProto (``""`` is the default domain)."""
    opsets: dict[str, int] = {}
    for field, wire, value in _fields(model_bytes):
        if field == 8 and wire == 2 and isinstance(value, bytes):
            domain, version = "", 0
            for sub_field, sub_wire, sub_value in _fields(value):
                if sub_field == 1 and sub_wire == 2 and isinstance(sub_value, bytes):
                    domain = sub_value.decode("utf-8", "replace")
                elif sub_field == 2 and sub_wire == 0 and isinstance(sub_value, int):
                    version = sub_value
            opsets["" if domain == "ai.onnx" else domain] = version
    return opsets
