"""Per-model op lists ("peer vectors"): our JSON format and a reader of torch-spyre's YAML.

An op list is a JSON file in ``tests/peer_ops_lists/`` (the format is documented in
docs/testing.md)::

    {"model": "...", "config": {...}, "source": "...",
     "ops": [{"name": "...", "op": "jnp.matmul",
              "operands": [{"shape": [8, 512], "dtype": "bfloat16"}, ...],
              "args": [...], "attrs": {...}, "list": false,
              "reduce_len": 512, "ops": 1, "from": "...", "xfail": "..."}]}

Each entry is one op of a real model: ``op`` names a ``jnp.*``, ``lax.*`` or
``jax.nn.*`` callable, called as ``op(*operands, *args, **attrs)`` (``list``: the
operands go in as one list, as ``jnp.concatenate`` takes them). An operand is
``{"shape", "dtype"}`` with optionally ``"strides"`` and ``"offset"`` (elements, as
torch gives a view of a bigger base: the operand holds the values that view reads),
``"init"`` (``"rand"``, the default, or ``"randint"`` with ``"high"``) and
``"device_layout"`` (``{"device_size", "stride_map"}``: the operand goes to the device
in that layout, which must be spyrejax's own layout of it). ``"result_layout"`` is the
layout ``spyrejax.jit`` must give the result. ``reduce_len`` and ``ops`` set the
tolerance (tests/helpers.py ``tol``).

:func:`torch_spyre_cases` reads torch-spyre's own files
(``tests/configs/model_ops_tests/*.yaml`` of its repository) into the same cases,
each either runnable or carrying the reason it is skipped.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import spyrejax as sj

LISTS = Path(__file__).parent / "peer_ops_lists"

_NAMESPACES = {"jnp": jnp, "lax": lax, "jax.nn": jax.nn}


@dataclasses.dataclass(frozen=True)
class Case:
    """One op to run: a callable, its operand specs and what to check."""

    id: str
    fn: Callable[..., Any] | None
    operands: tuple[dict, ...] = ()
    reduce_len: int = 1
    ops: int = 1
    result_layout: dict | None = None
    skip: str | None = None
    xfail: str | None = None


def resolve(name: str) -> Callable[..., Any]:
    """The callable ``jnp.X``, ``lax.X`` or ``jax.nn.X`` names."""
    space, _, attr = name.rpartition(".")
    if space not in _NAMESPACES or not hasattr(_NAMESPACES[space], attr):
        raise ValueError(f"op {name!r} is not a jnp, lax or jax.nn callable")
    return getattr(_NAMESPACES[space], attr)


def _tuples(v: Any) -> Any:
    """JSON lists as tuples (static shapes, axes and dimension numbers are hashable)."""
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _call(op: Callable, args: tuple, attrs: dict, as_list: bool) -> Callable[..., Any]:
    def fn(*xs):
        head = (list(xs),) if as_list else xs
        return op(*head, *args, **attrs)

    return fn


def our_cases(path: Path) -> list[Case]:
    """The cases of one of our JSON op lists."""
    doc = json.loads(path.read_text())
    cases = []
    for e in doc["ops"]:
        fn = _call(
            resolve(e["op"]),
            _tuples(e.get("args", [])),
            {k: _tuples(v) for k, v in e.get("attrs", {}).items()},
            e.get("list", False),
        )
        cases.append(
            Case(
                id=f"{path.stem}/{e['name']}",
                fn=fn,
                operands=tuple(e["operands"]),
                reduce_len=e.get("reduce_len", 1),
                ops=e.get("ops", 1),
                result_layout=e.get("result_layout"),
                xfail=e.get("xfail"),
            )
        )
    return cases


def host_dtype(name: str) -> np.dtype:
    """The host dtype of a dtype name (``torch.`` prefix allowed; int64 is held as int32)."""
    name = name.removeprefix("torch.")
    name = {"half": "float16", "float": "float32", "long": "int64", "int": "int32"}.get(name, name)
    if name == "int64" and not jax.config.jax_enable_x64:
        name = "int32"  # as torch-spyre holds it on the device, and jnp without x64
    return np.dtype(jnp.dtype(name))


def operand(spec: dict, rng: np.random.Generator) -> np.ndarray:
    """The host values of one operand spec (a view's values when it has strides)."""
    shape, dtype = tuple(spec["shape"]), host_dtype(spec["dtype"])
    strides = spec.get("strides")
    offset = spec.get("offset", 0)
    span = offset + 1 + sum((n - 1) * s for n, s in zip(shape, strides or (), strict=False))
    size = span if strides is not None else int(np.prod(shape))
    if spec.get("init") == "randint" or dtype.kind in "iub":
        high = min(int(spec.get("high", 2 if dtype.kind == "b" else 100)), 2**31 - 1)
        base = rng.integers(0, high, size=size).astype(dtype)
    else:
        base = rng.uniform(-2.0, 2.0, size=size).astype(np.float32).astype(dtype)
    if strides is None:
        return base.reshape(shape)
    item = base.itemsize
    view = np.lib.stride_tricks.as_strided(
        base[offset:], shape, tuple(s * item for s in strides), writeable=False
    )
    return np.ascontiguousarray(view)


def layout_of(spec: dict, dtype: np.dtype) -> sj.SpyreTensorLayout:
    """A ``{"device_size", "stride_map"}`` entry as a layout of ``dtype``."""
    return sj.SpyreTensorLayout.from_stride_map(spec["device_size"], spec["stride_map"], dtype)


def same_placement(a: sj.SpyreTensorLayout, b: sj.SpyreTensorLayout, shape) -> bool:
    """Whether two layouts place every element of a ``shape`` tensor alike.

    Device dims of size 1 are dropped first: torch-spyre leaves out a host dim of size 1
    that spyrejax keeps as a device dim of size 1 (``[2, 1, 32]`` against
    ``[1, 2, 1, 32]`` for ``[1, 1, 41]``), which moves no element.
    """
    keep_a = [i for i, n in enumerate(a.device_size) if n != 1]
    keep_b = [i for i, n in enumerate(b.device_size) if n != 1]
    if [a.device_size[i] for i in keep_a] != [b.device_size[i] for i in keep_b]:
        return False
    ca = a.for_host(tuple(shape)).device_coords()[..., keep_a]
    cb = b.for_host(tuple(shape)).device_coords()[..., keep_b]
    return bool(np.array_equal(ca, cb))


def stated(spec: dict | None, shape: tuple[int, ...]) -> bool:
    """Whether a device_layout entry says more than the host shape (a copy of it says nothing)."""
    return spec is not None and tuple(spec["device_size"]) != tuple(shape)


# --- torch-spyre's files ---------------------------------------------------------------------

# torch-spyre op name -> (callable, positional arguments after the tensors it keeps).
_UNARY = {
    "torch.Tensor.cos": jnp.cos,
    "torch.Tensor.sin": jnp.sin,
    "torch.cos": jnp.cos,
    "torch.sin": jnp.sin,
    "torch.rsqrt": lax.rsqrt,
    "torch.neg": jnp.negative,
    "torch.exp": jnp.exp,
    "torch.tanh": jnp.tanh,
    "torch.sigmoid": jax.nn.sigmoid,
    "torch.nn.functional.silu": jax.nn.silu,
    "torch.Tensor.float": lambda x: x.astype(jnp.float32),
    "torch.Tensor.contiguous": lambda x: x + jnp.zeros((), x.dtype),
}
_BINARY = {
    "torch.add": jnp.add,
    "torch.sub": jnp.subtract,
    "torch.mul": jnp.multiply,
    "torch.div": jnp.divide,
    "torch.le": jnp.less_equal,
    "torch.lt": jnp.less,
    "torch.ge": jnp.greater_equal,
    "torch.gt": jnp.greater,
    "torch.eq": jnp.equal,
    "torch.maximum": jnp.maximum,
    "torch.minimum": jnp.minimum,
    "torch.matmul": jnp.matmul,
    "torch.bmm": jnp.matmul,
}


def _scalar_operand(v: Any, like: dict) -> Any:
    dtype = host_dtype(like["dtype"])
    return np.asarray(v, dtype=dtype) if isinstance(v, int | float) else v


def _torch_op(name: str, tensors: list[dict], values: list[Any]) -> tuple[Callable, int] | str:
    """``(fn, reduce_len)`` for a torch op of torch-spyre's file, or why it is skipped."""
    if name in _UNARY and len(tensors) == 1 and not values:
        return _UNARY[name], 1
    if name in _BINARY and len(tensors) + len(values) == 2:
        op = _BINARY[name]
        if len(tensors) == 2:
            k = tensors[0]["shape"][-1] if name in ("torch.matmul", "torch.bmm") else 1
            return op, k
        c = _scalar_operand(values[0], tensors[0])
        return (lambda x: op(x, c)), 1
    if name == "torch.Tensor.transpose" and len(tensors) == 1 and len(values) == 2:
        return (lambda x: jnp.swapaxes(x, values[0], values[1])), 1
    if name in ("torch.Tensor.view", "torch.reshape", "torch.Tensor.reshape") and values:
        shape = tuple(values[0]) if isinstance(values[0], list) else tuple(values)
        return (lambda x: jnp.reshape(x, shape)), 1
    if name == "torch.Tensor.expand" and len(tensors) == 1 and values:
        src = tensors[0]["shape"]
        lead = len(values) - len(src)
        shape = tuple(src[i - lead] if v == -1 else v for i, v in enumerate(values))
        return (lambda x: jnp.broadcast_to(x, shape)), 1
    if name == "torch.mean" and len(tensors) == 1 and values:
        axis = tuple(values[0]) if isinstance(values[0], list) else values[0]
        keep = bool(values[1]) if len(values) > 1 else False
        k = int(np.prod([tensors[0]["shape"][a] for a in np.atleast_1d(axis)]))
        return (lambda x: jnp.mean(x, axis=axis, keepdims=keep)), k
    if name == "torch.pow" and len(tensors) == 1 and values == [2]:
        return jnp.square, 1
    if name == "torch.nn.functional.embedding" and len(tensors) == 2:
        return (lambda i, w: jnp.take(w, i, axis=0)), 1
    return f"{name} with {len(tensors)} tensor(s) and values {values!r} is not mapped"


def _torch_tensor(t: dict) -> dict:
    spec = {"shape": t["shape"], "dtype": t["dtype"]}
    contiguous = list(np.cumprod([1, *t["shape"][::-1]])[-2::-1]) if t["shape"] else []
    if t.get("stride") is not None and list(t["stride"]) != [int(s) for s in contiguous]:
        spec["strides"] = t["stride"]
    if t.get("storage_offset"):
        spec["offset"] = t["storage_offset"]
        spec.setdefault("strides", t.get("stride") or contiguous)
    if t.get("init") == "randint":
        spec["init"] = "randint"
        spec["high"] = t.get("init_args", {}).get("high", 100)
    if t.get("device_layout"):
        spec["device_layout"] = {
            "device_size": t["device_layout"]["device_size"],
            "stride_map": t["device_layout"]["stride_map"],
        }
    return spec


def _torch_case(path: Path, i: int, entry: dict) -> Case:
    cid = f"{path.stem}/{i}-{entry.get('name', '?')}"
    args = entry.get("sample_inputs_func", {}).get("args", [])
    kwargs = entry.get("sample_inputs_func", {}).get("kwargs")
    tensors = [_torch_tensor(a["tensor"]) for a in args if "tensor" in a]
    values = [a["value"] for a in args if "value" in a]
    if entry.get("name") == "torch.cat" and args and "tensor_list" in args[0] and not kwargs:
        axis = args[1]["value"] if len(args) > 1 else 0
        parts = tuple(_torch_tensor(t) for t in args[0]["tensor_list"])
        return Case(cid, lambda *xs: jnp.concatenate(xs, axis=axis), parts)
    if kwargs or any("tensor_list" in a for a in args) or len(tensors) + len(values) != len(args):
        return Case(cid, None, skip="keyword or tensor-list arguments are not mapped")
    if any("tensor" in a for a in args[len(tensors) :]):
        return Case(cid, None, skip="tensors after scalar arguments are not mapped")
    if entry.get("name") == "torch.nn.functional.embedding" and len(tensors) == 2:
        vocab = tensors[1]["shape"][0]
        tensors[0]["high"] = min(tensors[0].get("high", vocab), vocab)
    found = _torch_op(entry.get("name", ""), tensors, values)
    if isinstance(found, str):
        return Case(cid, None, skip=found)
    fn, k = found
    return Case(cid, fn, tuple(tensors), reduce_len=k)


def torch_spyre_cases(folder: Path) -> list[Case]:
    """The op entries of torch-spyre's model op lists (``*.yaml``) in ``folder``.

    Reads each file's ``test_suite_config.files[].tests[].edits.ops.include`` entries:
    ``name`` (a torch op) and ``sample_inputs_func.args`` (``tensor`` with shape,
    stride, storage_offset, dtype, init and optionally ``device_layout``; ``value``).
    Entries we cannot express come back with ``skip`` set to the reason.
    """
    import yaml  # only when a user asks for torch-spyre's files (pytest --peer-ops DIR)

    cases = []
    for path in sorted(Path(folder).glob("*.yaml")):
        doc = yaml.safe_load(path.read_text()) or {}
        files = (doc.get("test_suite_config") or {}).get("files") or []
        entries = [
            e
            for f in files
            for t in f.get("tests") or []
            for e in ((t.get("edits") or {}).get("ops") or {}).get("include") or []
        ]
        cases.extend(_torch_case(path, i, e) for i, e in enumerate(entries))
    return cases
