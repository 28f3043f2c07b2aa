"""A model is exactly its bytes: refuse an ONNX model that refers to anything outside itself.

ONNX Runtime resolves a tensor stored as *external data* (``TensorProto.data_location ==
EXTERNAL``, its ``external_data`` naming a file) relative to the working directory when a model
is loaded from bytes, so such a model reads a file of the machine it runs on. A node in an
operator domain that is not one the benchmark allows would call code outside the model (a custom
operator library). :func:`check_self_contained` walks the serialized ``ModelProto`` **by
structure** (a bounded protobuf reader, as :mod:`.onnx_opsets`: the enclave does not install the
``onnx`` package) through every graph where a tensor or a node can live: the main graph, every
subgraph of every attribute (``Loop``/``If``/``Scan`` bodies, at any depth), model-local
functions (and their attribute defaults), training-info graphs and sparse tensors, and refuses:

- a tensor with ``data_location`` other than DEFAULT or any ``external_data`` entry
  (:class:`ExternalDataError`), wherever it is;
- a node, or an ``opset_import``, in a domain outside ``domains`` that no model-local function
  defines (:class:`UnknownOpDomainError`), when ``domains`` is given;
- bytes that do not parse as a ``ModelProto`` or nest deeper than :data:`MAX_DEPTH`
  (:class:`UnreadableModelError`).

Every field is read in every occurrence (protobuf merges repeated occurrences of a message
field, so walking all of them covers what any parser sees). Errors::

    ModelContractError (interface)
    └── UnsafeModelError
        ├── ExternalDataError      a tensor refers to data outside the model's bytes
        ├── UnknownOpDomainError   a node or opset import in a domain the benchmark does not allow
        └── UnreadableModelError   not a ModelProto this reader can walk
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Final

from sealbench.benchmarks.interface import ModelContractError
from sealbench.benchmarks.onnx_opsets import read_varint

__all__ = [
    "MAX_DEPTH",
    "STANDARD_DOMAINS",
    "ExternalDataError",
    "UnknownOpDomainError",
    "UnreadableModelError",
    "UnsafeModelError",
    "check_self_contained",
]

#: The ONNX standard operator set (``""`` and its alias ``ai.onnx``).
STANDARD_DOMAINS: Final = frozenset({"", "ai.onnx"})
#: Deepest nesting of messages walked (a graph in an attribute in a node in a graph ...).
MAX_DEPTH: Final = 64

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class UnsafeModelError(ModelContractError):
    """The model refers to something outside its own bytes, or cannot be walked."""

    def __init__(self, difference: str) -> None:
        super().__init__((difference,))


class ExternalDataError(UnsafeModelError):
    """A tensor's data is stored outside the model (``data_location`` EXTERNAL)."""


class UnknownOpDomainError(UnsafeModelError):
    """A node or an ``opset_import`` names an operator domain the benchmark does not allow."""


class UnreadableModelError(UnsafeModelError):
    """The bytes are not a ModelProto this reader can walk (malformed, or nested too deeply)."""


def _fields(data: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value) of one message: an int for varints, a view for
    length-delimited fields (fixed-width values are skipped: no field walked here has one)."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise UnreadableModelError("not an ONNX model (field number 0)")
        if wire == _VARINT:
            value, pos = _varint(data, pos)
            yield number, wire, value
        elif wire == _LEN:
            length, pos = _varint(data, pos)
            if pos + length > end:
                raise UnreadableModelError("not an ONNX model (truncated field)")
            yield number, wire, data[pos:pos + length]
            pos += length
        elif wire in (_I64, _I32):
            pos += 8 if wire == _I64 else 4
            if pos > end:
                raise UnreadableModelError("not an ONNX model (truncated field)")
        else:
            raise UnreadableModelError(f"not an ONNX model (wire type {wire})")


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    try:
        return read_varint(data, pos)
    except ValueError:
        raise UnreadableModelError("not an ONNX model (truncated varint)") from None


def _text(value: int | memoryview) -> str:
    if not isinstance(value, memoryview):
        raise UnreadableModelError("not an ONNX model (a string field is not a string)")
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableModelError("not an ONNX model (a string is not UTF-8)") from exc


def _message(value: int | memoryview) -> memoryview:
    if not isinstance(value, memoryview):
        raise UnreadableModelError("not an ONNX model (a message field is not a message)")
    return value


# Field numbers of onnx/onnx.proto (ONNX 1.17), only those that hold tensors, graphs or nodes.
_MODEL_OPSET, _MODEL_GRAPH, _MODEL_TRAINING, _MODEL_FUNCTIONS = 8, 7, 20, 25
_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_SPARSE = 1, 5, 15
_NODE_ATTRIBUTE, _NODE_OP_TYPE, _NODE_DOMAIN = 5, 4, 7
_ATTR_T, _ATTR_G, _ATTR_TENSORS, _ATTR_GRAPHS, _ATTR_SPARSE, _ATTR_SPARSES = 5, 6, 10, 11, 22, 23
_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 13, 14
_SPARSE_VALUES, _SPARSE_INDICES = 1, 2
_TRAINING_GRAPHS = (1, 2)
_FUNCTION_NAME, _FUNCTION_NODE, _FUNCTION_OPSET, _FUNCTION_DOMAIN, _FUNCTION_ATTRIBUTE = (
    1, 7, 9, 10, 11)
_OPSET_DOMAIN = 1


@dataclass
class _Walk:
    domains: frozenset[str] | None
    #: (domain, name) of each model-local function.
    functions: set[tuple[str, str]] = field(default_factory=set)
    #: (domain, op type) of each node, in every graph and function.
    ops: list[tuple[str, str]] = field(default_factory=list)
    opset_domains: set[str] = field(default_factory=set)
    tensors: int = 0

    def tensor(self, data: memoryview, depth: int, where: str) -> None:
        self._deeper(depth)
        self.tensors += 1
        for number, wire, value in _fields(data):
            if number == _TENSOR_EXTERNAL_DATA or (
                    number == _TENSOR_DATA_LOCATION and (wire != _VARINT or value != 0)):
                raise ExternalDataError(
                    f"a tensor in {where} is stored as external data (data_location EXTERNAL): "
                    "a model must carry all its data in its own bytes")

    def sparse(self, data: memoryview, depth: int, where: str) -> None:
        self._deeper(depth)
        for number, _wire, value in _fields(data):
            if number in (_SPARSE_VALUES, _SPARSE_INDICES):
                self.tensor(_message(value), depth + 1, where)

    def graph(self, data: memoryview, depth: int, where: str) -> None:
        self._deeper(depth)
        for number, _wire, value in _fields(data):
            if number == _GRAPH_NODE:
                self.node(_message(value), depth + 1, where)
            elif number == _GRAPH_INITIALIZER:
                self.tensor(_message(value), depth + 1, where)
            elif number == _GRAPH_SPARSE:
                self.sparse(_message(value), depth + 1, where)

    def node(self, data: memoryview, depth: int, where: str) -> None:
        self._deeper(depth)
        domain, op_type = "", ""
        for number, _wire, value in _fields(data):
            if number == _NODE_DOMAIN:
                domain = _text(value)
            elif number == _NODE_OP_TYPE:
                op_type = _text(value)
            elif number == _NODE_ATTRIBUTE:
                self.attribute(_message(value), depth + 1, f"a subgraph of {where}")
        self.ops.append((domain, op_type))

    def attribute(self, data: memoryview, depth: int, where: str) -> None:
        self._deeper(depth)
        for number, _wire, value in _fields(data):
            if number in (_ATTR_T, _ATTR_TENSORS):
                self.tensor(_message(value), depth + 1, where)
            elif number in (_ATTR_G, _ATTR_GRAPHS):
                self.graph(_message(value), depth + 1, where)
            elif number in (_ATTR_SPARSE, _ATTR_SPARSES):
                self.sparse(_message(value), depth + 1, where)

    def function(self, data: memoryview, depth: int) -> None:
        self._deeper(depth)
        name = domain = ""
        for number, _wire, value in _fields(data):
            if number == _FUNCTION_NAME:
                name = _text(value)
            elif number == _FUNCTION_DOMAIN:
                domain = _text(value)
            elif number == _FUNCTION_NODE:
                self.node(_message(value), depth + 1, "a model-local function")
            elif number == _FUNCTION_ATTRIBUTE:
                self.attribute(_message(value), depth + 1, "a model-local function")
            elif number == _FUNCTION_OPSET:
                self.opset(_message(value))
        self.functions.add((domain, name))

    def opset(self, data: memoryview) -> None:
        for number, _wire, value in _fields(data):
            if number == _OPSET_DOMAIN:
                self.opset_domains.add(_text(value))

    @staticmethod
    def _deeper(depth: int) -> None:
        if depth > MAX_DEPTH:
            raise UnreadableModelError(f"the model nests deeper than {MAX_DEPTH} levels")

    def check_domains(self) -> None:
        if self.domains is None:
            return
        local = {domain for domain, _name in self.functions}
        for domain, op_type in self.ops:
            if domain in self.domains or (domain, op_type) in self.functions:
                continue
            raise UnknownOpDomainError(
                f"operator {op_type!r} is in domain {domain!r}, which the benchmark does not "
                f"allow (allowed: {sorted(self.domains)})")
        for domain in sorted(self.opset_domains - self.domains - local):
            raise UnknownOpDomainError(
                f"the model imports operator domain {domain!r}, which the benchmark does not "
                f"allow (allowed: {sorted(self.domains)})")


def check_self_contained(model_bytes: bytes, domains: Collection[str] | None = None) -> int:
    """Refuse ``model_bytes`` unless it is a ModelProto whose every tensor is stored in it and,
    when ``domains`` is given, whose every node and opset import is in one of ``domains`` (or
    calls a function the model defines). Returns how many tensors were walked. Raises a
    subclass of :class:`UnsafeModelError` (a :class:`ModelContractError`) naming what it found
    and where, never a file path or value of the model."""
    walk = _Walk(None if domains is None else frozenset(domains))
    model = memoryview(model_bytes)
    graphs = 0
    for number, _wire, value in _fields(model):
        if number == _MODEL_GRAPH:
            graphs += 1
            walk.graph(_message(value), 1, "the main graph")
        elif number == _MODEL_OPSET:
            walk.opset(_message(value))
        elif number == _MODEL_FUNCTIONS:
            walk.function(_message(value), 1)
        elif number == _MODEL_TRAINING:
            for sub, _sub_wire, sub_value in _fields(_message(value)):
                if sub in _TRAINING_GRAPHS:
                    walk.graph(_message(sub_value), 2, "a training-info graph")
    if not graphs:
        raise UnreadableModelError("not an ONNX model (no graph)")
    walk.check_domains()
    return walk.tensors
