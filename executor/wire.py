"""What crosses between the harness and the executor: values and their encoding.

Read by both sides (``harness/client.py`` and ``harness/process.py``, ``server.py`` in the
executor). Each message is one frame of ``confine/frames.py`` (the one length-prefixed frame reader, with its size limit
and deadline) whose payload is a ``torch.save`` of plain data: None, bool, int, float, str,
bytes, lists of them, str-keyed dicts of them, and CPU tensors. The harness reads payloads
with ``torch.load(weights_only=True)``, which builds nothing else, so a hostile executor can
only send data: never code, never an object whose methods would run in the harness.

A value is encoded as a tree of tagged lists (``encode``/``decode``):

    ["T", flat, dtype, shape, stride, offset, device, requires_grad, graph]
                                      a tensor: ``flat`` holds its whole storage (so strides,
                                      offsets and zero-stride expansions arrive as they left);
                                      ``graph`` is set on tensors the executor keeps an autograd
                                      graph for: {"id": n, "saved": [tensors] or None, "why": str}
    ["L", items], ["U", items]         a list, a tuple (named tuples arrive as tuples)
    ["D", [[key, value], ...]]         a dict
    ["dt", "float32"], ["dv", "cuda:0"], ["sz", [2, 3]], ["sl", start, stop, step]
    ["H", id, info]                   an object that stays in the executor (a handle); ``info``
                                      holds its type name, ``__name__``, whether it is callable
    ["R", id]                         the harness passing a handle back to the executor
    ["C", id, name]                   a harness function passed as an argument (a callback)

Anything else is refused with ``ProtocolError`` on the receiving side.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import torch

from confine.frames import Closed, ProtocolError, TimedOut, read_frame, write_frame

__all__ = ["DTYPES", "Closed", "Codec", "ProtocolError", "TimedOut", "recv_frame", "send_frame"]
_SCALARS = (type(None), bool, int, float, str, bytes)
DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2,
)}


# -- frames ----------------------------------------------------------------------------


def dumps(tree: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(tree, buffer)
    return buffer.getvalue()


def loads(payload: bytes) -> Any:
    try:
        return torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")
    except Exception as error:  # noqa: BLE001  any failure to parse is the sender's fault
        raise ProtocolError(f"unreadable frame ({type(error).__name__}: {error})") from None


def send_frame(fd: int, tree: Any) -> int:
    """Write one frame holding ``tree`` (plain data, see the module docstring) to ``fd``; return its size."""
    return write_frame(fd, dumps(tree))


def recv_frame(fd: int, deadline: float | None = None, limit: int | None = None) -> Any:
    """Read one frame from ``fd`` and decode its payload; raise Closed, TimedOut (past
    ``deadline``) or ProtocolError (a frame over ``limit`` bytes is refused unread: see
    ``confine.frames.read_frame``)."""
    return loads(read_frame(fd, deadline, limit))


# -- values ----------------------------------------------------------------------------


def encode_tensor(tensor: torch.Tensor, graph: dict | None = None) -> list:
    """A tensor as ["T", ...]: its whole storage copied to the CPU, and how to view it."""
    requires_grad = bool(tensor.requires_grad)
    tensor = tensor.detach()
    if type(tensor) is not torch.Tensor:
        tensor = torch.Tensor._make_subclass(torch.Tensor, tensor)  # plain data, whatever the class said
    if tensor.layout != torch.strided or tensor.is_quantized or tensor.device.type == "meta":
        raise TypeError(f"cannot send a {tensor.layout} {tensor.device.type} tensor; send a dense tensor")
    itemsize = tensor.element_size()
    storage = tensor.untyped_storage()
    flat = torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(storage, 0, (storage.nbytes() // itemsize,), (1,))
    return ["T", flat.cpu(), str(tensor.dtype).removeprefix("torch."),
            list(tensor.shape), list(tensor.stride()), int(tensor.storage_offset()), str(tensor.device),
            requires_grad, graph]


def decode_tensor(node: list, device_map: Callable[[str], str] | None = None) -> tuple[torch.Tensor, bool, Any]:
    """(tensor, requires_grad, graph) from ["T", ...]; the tensor is a plain, fresh torch.Tensor."""
    if len(node) != 9:
        raise ProtocolError("a tensor record needs 9 fields")
    _, flat, dtype_name, shape, stride, offset, device, requires_grad, graph = node
    dtype = DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    if type(flat) is not torch.Tensor or dtype is None or flat.dtype != dtype or flat.dim() != 1:
        raise ProtocolError(f"a malformed tensor record (dtype {dtype_name!r})")
    if not (_ints(shape) and _ints(stride) and len(shape) == len(stride) and isinstance(offset, int)
            and isinstance(device, str) and isinstance(requires_grad, bool)):
        raise ProtocolError("a tensor record with a malformed shape, stride, offset or device")
    if any(size < 0 for size in shape) or any(step < 0 for step in stride) or offset < 0:
        raise ProtocolError("a tensor record with a negative size, stride or offset")
    extent = offset + sum((size - 1) * step for size, step in zip(shape, stride)) + 1 if all(shape) else 0
    if extent > flat.numel():
        raise ProtocolError(f"a tensor record that reaches past its storage ({extent} > {flat.numel()} elements)")
    target = device_map(device) if device_map else device
    base = flat if target == "cpu" else flat.to(target)
    return base.as_strided(shape, stride, offset), requires_grad, graph


def _ints(values: Any) -> bool:
    return isinstance(values, list) and all(type(v) is int for v in values)


class Codec:
    """Encode and decode values; what to do with objects that cannot be copied is up to the side.

    ``export(obj)`` turns an object that is not plain data into a tagged node (a handle, a
    callback) or raises TypeError; ``imports`` maps the tags this side accepts ("H", "R", "C")
    to functions that rebuild the object; ``on_tensor(tensor, requires_grad, graph)`` may wrap
    a decoded tensor.
    """

    def __init__(self, export: Callable[[Any], list], imports: dict[str, Callable[[list], Any]],
                 on_tensor: Callable[[torch.Tensor, bool, Any], Any] | None = None,
                 encode_tensor_fn: Callable[[torch.Tensor], list] = encode_tensor,
                 device_map: Callable[[str], str] | None = None):
        self.export = export
        self.imports = imports
        self.on_tensor = on_tensor
        self.encode_tensor = encode_tensor_fn
        self.device_map = device_map

    def encode(self, value: Any, depth: int = 0) -> Any:
        if depth > 64:
            raise TypeError("a value nested more than 64 levels deep")
        if isinstance(value, _SCALARS) and type(value) in _SCALARS:
            return value
        if isinstance(value, torch.Tensor):
            return self.encode_tensor(value)
        if isinstance(value, torch.dtype):
            return ["dt", str(value).removeprefix("torch.")]
        if isinstance(value, torch.device):
            return ["dv", str(value)]
        if isinstance(value, torch.Size):
            return ["sz", [int(v) for v in value]]
        if type(value) is list:
            return ["L", [self.encode(v, depth + 1) for v in value]]
        if isinstance(value, tuple) and (type(value) is tuple or hasattr(value, "_fields")):
            return ["U", [self.encode(v, depth + 1) for v in value]]
        if type(value) is dict:
            return ["D", [[self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in value.items()]]
        if type(value) is slice:
            return ["sl", self.encode(value.start), self.encode(value.stop), self.encode(value.step)]
        return self.export(value)

    def decode(self, node: Any, depth: int = 0) -> Any:
        if depth > 64:
            raise ProtocolError("a value nested more than 64 levels deep")
        if type(node) in _SCALARS:
            return node
        if type(node) is not list or not node or type(node[0]) is not str:
            raise ProtocolError(f"an untagged value of type {type(node).__name__}")
        tag = node[0]
        if tag == "T":
            tensor, requires_grad, graph = decode_tensor(node, self.device_map)
            return self.on_tensor(tensor, requires_grad, graph) if self.on_tensor else tensor.requires_grad_(requires_grad)
        if tag in ("L", "U") and len(node) == 2 and type(node[1]) is list:
            items = [self.decode(v, depth + 1) for v in node[1]]
            return items if tag == "L" else tuple(items)
        if tag == "D" and len(node) == 2 and type(node[1]) is list:
            pairs = []
            for pair in node[1]:
                if type(pair) is not list or len(pair) != 2:
                    raise ProtocolError("a malformed dict entry")
                pairs.append((self.decode(pair[0], depth + 1), self.decode(pair[1], depth + 1)))
            try:
                return dict(pairs)
            except TypeError:
                raise ProtocolError("a dict with an unhashable key") from None
        if tag == "dt" and len(node) == 2 and node[1] in DTYPES:
            return DTYPES[node[1]]
        if tag == "dv" and len(node) == 2 and isinstance(node[1], str):
            try:
                return torch.device(node[1])
            except RuntimeError:
                raise ProtocolError(f"a malformed device {node[1]!r}") from None
        if tag == "sz" and len(node) == 2 and _ints(node[1]):
            return torch.Size(node[1])
        if tag == "sl" and len(node) == 4:
            return slice(*(self.decode(v, depth + 1) for v in node[1:]))
        if tag in self.imports:
            return self.imports[tag](node)
        raise ProtocolError(f"a value with the unknown tag {tag!r}")
