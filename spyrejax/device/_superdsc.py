"""SuperDSC kernel specs, launch specs and the RFC 0552 validator (spyre-device section 5).

One SuperDSC document per divided op: an object with the single key
``"<index>_<opfunc>"`` holding the division (``numWkSlicesPerDim_``,
``coreIdToWkSlice_``...) and one DSC (the iteration sizes ``N_``, the per-core slice
``dataStageParam_``, each labelled data set's layout, the ``scheduleTree_`` of
allocations with per-core start addresses, the compute op). Field names and value
types are those of the spec. Pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import DeviceError
from ..layout._lanes import LanedLayout, lane_text
from ._division import WorkDivision
from ._program import DeviceOp, DeviceProgram
from ._space import Operand

__all__ = ["DS_TYPES", "launch_spec", "superdsc", "validate_superdsc"]

DS_TYPES = (
    "OUTPUT", "INPUT", "MODEL", "WEIGHT", "STACK", "HEAP", "RESERVE1", "RESERVE2", "CONST",
    "KERNEL", "KERNEL_IDX",
)  # fmt: skip
_LABELS_OTHER = ("OUTPUT", "KERNEL", "INPUT", "KERNEL_IDX")
_LABELS_MATMUL = ("INPUT", "KERNEL", "OUTPUT")
_MAX_LDS = 8


def _layout_order(op: Operand) -> tuple[list[str], list[str]]:
    """``layoutDimOrder_`` (outward from the stick lanes) and ``stickDimOrder_``."""
    walks = op.walks
    order = [w[0] for w in reversed(walks[:-1]) if w is not None]
    stick = [walks[-1][0]] if walks and walks[-1] is not None else []
    return order, stick


def _gap_fields(op: Operand) -> dict[str, dict[str, int]]:
    """``frontGap_`` and ``backGap_`` of an operand whose layout has gaps, else nothing.

    Keyed by the iteration variable each gapped device dim walks (``d<j>`` for a device
    dim that walks none); values are device positions along that dim.
    """
    layout = op.tensor.layout
    if not layout.has_gaps:
        return {}
    front: dict[str, int] = {}
    back: dict[str, int] = {}
    for j, (f, b) in enumerate(layout.device_gaps):
        walk = op.walks[j] if j < len(op.walks) else None
        name = walk[0] if walk is not None else f"d{j}"
        if f:
            front[name] = f
        if b:
            back[name] = b
    return {"frontGap_": front, "backGap_": back}


def _arrangement_field(op: Operand) -> dict[str, str]:
    """``elementArrangement_`` of an operand in a non-standard element arrangement.

    torch-spyre's op specs carry each tensor's ``ElementArrangement`` (the order the
    card's 16 <-> 32-bit conversion emits); the field names it where it is not
    ``STANDARD``, so a standard document is unchanged.
    """
    layout = op.tensor.layout
    return {"elementArrangement_": layout.arrangement.value} if layout.is_arranged else {}


def _labels(div: WorkDivision) -> list[str]:
    names = _LABELS_MATMUL if div.space.kind == "matmul" else _LABELS_OTHER
    keys: dict[Any, str] = {}
    out = []
    for op in div.space.operands:
        order, stick = _layout_order(op)
        key = (tuple(order), tuple(stick), op.tensor.layout.elems_per_stick)
        if key not in keys:
            if len(keys) == len(names):
                raise DeviceError(f"{div.space.opfunc}: more distinct layouts than labels")
            keys[key] = names[len(keys)]
        out.append(keys[key])
    return out


def _scale(div: WorkDivision, op: Operand) -> dict[str, int]:
    stick_vars = {w[0] for o in div.space.inputs for w in o.walks[-1:] if w is not None}
    out = {}
    for d in div.space.dims:
        if op.role == "output" and d.reduced:
            out[d.name] = -2 if d.name in stick_vars else -1
        else:
            out[d.name] = 1
    return out


def _dims(div: WorkDivision, f: Any) -> dict[str, Any]:
    return {f"{d.name}_": f(d) for d in div.space.dims}


def superdsc(
    op: DeviceOp,
    lx_address: Mapping[str, int | None] | None = None,
    ddr_base: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The SuperDSC document of a divided op.

    Args:
        op: a :class:`DeviceOp` with a division.
        lx_address: LX addresses of the values placed in LX (the same on every core).
        ddr_base: DDR base addresses of the other values (default 0).

    Raises:
        DeviceError: for an op with no division.
    """
    div = op.division
    if div is None:
        raise DeviceError(f"{op.opfunc} has no work division: only compute ops get SuperDSC")
    _refuse_lanes(op.opfunc, div)
    _refuse_ragged(op.opfunc, div)
    lx_address = lx_address or {}
    ddr_base = ddr_base or {}
    space, cores = div.space, div.cores_used
    core_ids = [str(c) for c in range(cores)]
    labels = _labels(div)
    names = [n for n, _ in op.desc.inputs] + [op.desc.output[0]]
    tensors = [f"Tensor{i}" for i in range(len(space.operands))]
    padded = _dims(div, lambda d: d.units * d.stick)
    ss = {"name_": "core", **_dims(div, lambda d: d.units * d.stick // div.splits[d.name])}
    info, lds, tree = {}, [], []
    for i, (o, label, value) in enumerate(zip(space.operands, labels, names, strict=True)):
        order, stick = _layout_order(o)
        info.setdefault(
            label,
            {
                "layoutDimOrder_": order,
                "stickDimOrder_": stick,
                "stickSize_": [o.tensor.layout.elems_per_stick],
            },
        )
        fmt = o.tensor.layout.device_dtype.name
        lds.append(
            {
                "ldsIdx_": i,
                "dsName_": tensors[i],
                "dsType_": label,
                "scale_": _scale(div, o),
                "wordLength": o.tensor.itemsize,
                "dataFormat_": fmt,
                "memOrg_": {"hbm": {"isPresent": 1}, "lx": {"isPresent": int(value in lx_address)}},
                **_gap_fields(o),
                **_arrangement_field(o),
            }
        )
        in_lx = lx_address.get(value) is not None
        where = "lx" if in_lx else "hbm"
        if in_lx:
            starts = {c: str(lx_address[value]) for c in core_ids}
        else:
            base = ddr_base.get(value, 0)
            starts = {c: str(base + div.offset(i, int(c))) for c in core_ids}
        tree.append(
            {
                "name_": f"allocate-{tensors[i]}_{where}",
                "component_": where,
                "startAddressCoreCorelet_": starts,
                "coordinates_": {
                    d.name: {
                        "foldFns_": ["core", "elem"],
                        "foldAttrs_": [div.splits[d.name], d.units * d.stick // div.splits[d.name]],
                    }
                    for d in space.dims
                },
            }
        )
    dsc = {
        "numCoresUsed_": cores,
        "numCoreletsUsed_": 1,
        "coreIdsUsed_": list(range(cores)),
        "N_": {"name_": "n", **padded},
        "dataStageParam_": {"0": {"ss_": ss, "el_": dict(ss)}},
        "primaryDsInfo_": info,
        "scheduleTree_": tree,
        "labeledDs_": lds,
        "computeOp_": [
            {
                "exUnit": "pt" if space.kind == "matmul" else "sfp",
                "opFuncName": space.opfunc,
                "inputLabeledDs": tensors[:-1],
                "outputLabeledDs": tensors[-1:],
            }
        ],
        "constantInfo_": {},
    }
    body = {
        "numCoresUsed_": cores,
        "coreIdToDsc_": dict.fromkeys(core_ids, 0),
        "numWkSlicesPerDim_": {d: div.splits[d] for d in space.names},
        "coreIdToWkSlice_": {c: div.core_to_slice(int(c)) for c in core_ids},
        "coreFoldProp_": {"factor_": cores, "label_": "core"},
        "coreletFoldProp_": {"factor_": 1, "label_": "corelet"},
        "coreIdToDscSchedule": {c: [[-1, 0, 0, 0]] for c in core_ids},
        "sdscFoldProps_": [{"factor_": cores, "label_": "core"}],
        "sdscFolds_": {"dim_prop_func": [{"Affine": {"alpha_": 1, "beta_": 0}}]},
        "dscs_": [{space.opfunc: dsc}],
    }
    return {f"{op.index}_{space.opfunc}": body}


def _refuse_ragged(opfunc: str, div: WorkDivision) -> None:
    """Raise for a ragged division: SuperDSC states one slice size for every core.

    ``dataStageParam_``'s ``ss_`` is each core's slice, the same on all; a split that
    does not divide its dim (:func:`~spyrejax.device.ragged_splits`) has a short last
    slice, and a document giving every core the full slice would read and write past
    the tensors' ends on the cores that own it.
    """
    if div.ragged:
        dims = ", ".join(f"{n} ({div.space.dim(n).units} / {div.splits[n]})" for n in div.ragged)
        raise DeviceError(
            f"{opfunc} is divided raggedly over {dims}: its last slice is short, and SuperDSC "
            "gives every core the same slice size, so this op has no SuperDSC "
            "(spyrejax.export refuses it)"
        )


def _refuse_lanes(opfunc: str, div: WorkDivision) -> None:
    """Raise for an op reading a lane view: SuperDSC has no field for a lane offset or stride.

    A labeled data set states its layout as the variables its device dims walk
    (``layoutDimOrder_``, ``stickDimOrder_``) and the stick's size (``stickSize_``): a
    stick's elements are its lanes in order. A lane view's elements lie ``s`` lanes
    apart from lane ``k`` (``lanes=k::s``), or from lane ``a`` on (a window, ``lanes=a:b``);
    written as a plain stick it would read the
    wrong lanes, so the op gets no document.
    """
    for o in div.space.operands:
        if isinstance(o.tensor.layout, LanedLayout):
            lanes = lane_text(o.tensor.layout)
            raise DeviceError(
                f"{opfunc} reads {o.tensor.name or 'an operand'} on lanes {lanes} of its "
                "sticks (a lane view); SuperDSC states a stick's size and dim orders but no "
                "lane offset or stride, so this op has no SuperDSC (spyrejax.export refuses it)"
            )


def validate_superdsc(doc: Mapping[str, Any]) -> None:
    """Check a SuperDSC document against the RFC 0552 rules the spec lists.

    Raises:
        DeviceError: listing every rule the document breaks.
    """
    problems = []
    if not isinstance(doc, Mapping) or len(doc) != 1:
        raise DeviceError("a SuperDSC document is one object with a single '<index>_<op>' key")
    ((key, body),) = doc.items()
    for entry in body.get("dscs_", []):
        for opfunc, dsc in entry.items():
            n, ids = dsc.get("numCoresUsed_"), dsc.get("coreIdsUsed_", [])
            if len(ids) != n:
                problems.append(f"{opfunc}: coreIdsUsed_ has {len(ids)} entries, not {n}")
            lds = dsc.get("labeledDs_", [])
            if len(lds) > _MAX_LDS:
                problems.append(f"{opfunc}: {len(lds)} labeled data sets (at most {_MAX_LDS})")
            names = {d.get("dsName_") for d in lds}
            for d in lds:
                if d.get("dsType_") not in DS_TYPES:
                    problems.append(
                        f"{opfunc}: dsType_ {d.get('dsType_')!r} is not one of DS_TYPES"
                    )
            for cop in dsc.get("computeOp_", []):
                for t in [*cop.get("inputLabeledDs", []), *cop.get("outputLabeledDs", [])]:
                    if t not in names:
                        problems.append(f"{opfunc}: computeOp_ tensor {t!r} is no dsName_")
            for node in dsc.get("scheduleTree_", []):
                for dim, c in node.get("coordinates_", {}).items():
                    if len(c.get("foldFns_", [])) != len(c.get("foldAttrs_", [])):
                        problems.append(
                            f"{opfunc}: {node.get('name_')} dim {dim}: fold functions and "
                            "attributes differ in length"
                        )
    if problems:
        raise DeviceError(f"SuperDSC {key} is invalid: " + "; ".join(problems))


def launch_spec(kernel_name: str, args: Sequence[tuple[str, Any, Any, Any]]) -> dict[str, Any]:
    """The launch spec (RFC 4755) of a program.

    Args:
        kernel_name: the kernel's name.
        args: ``(role, shape, dtype name, layout)`` per argument, inputs then outputs.
    """
    return {
        "version": 1,
        "kernel_name": kernel_name,
        "args": [
            {
                "arg_index": i,
                "role": role,
                "shape": list(shape),
                "dtype": dtype,
                "layout": {
                    "device_size": list(layout.device_size),
                    "stride_map": list(layout.stride_map),
                    "device_dtype": layout.device_dtype.name,
                    "element_arrangement": layout.arrangement.value,
                },
            }
            for i, (role, shape, dtype, layout) in enumerate(args)
        ],
    }


def program_superdsc(program: DeviceProgram, ddr_base: Mapping[str, int]) -> list[dict]:
    """Every divided op's SuperDSC document."""
    lx = {n: a for n, a in program.lx.address.items() if a is not None}
    return [superdsc(op, lx, ddr_base) for op in program.compute_ops]
