"""The stages of a ``spyrejax.jit`` function, as in ``jax.stages``.

``SpyreJit.trace`` gives a :class:`Traced` (the plain JAX jaxpr), its ``lower()`` a
:class:`Lowered` (the plan and the Spyre-level jaxpr), and that one's ``compile()`` a
:class:`Compiled`, called with the same arguments. Each stage reads the one
:class:`~spyrejax.frontend._lowering.Lowering` of its input signature.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from .._errors import SpyreTypeError
from .._jax import ClosedJaxpr
from ..device import Machine
from ..lowering._keys import unwrap_keys
from ..primitives._array import SpyreType
from . import _x64
from ._arguments import HostAval, leaf_aval
from ._gc import gc_paused

# The stages read the one ``frontend._lowering.Lowering`` of their signature (which builds them:
# importing it here would be a cycle), typed by what they read of it.
Lowering = Any

__all__ = ["Compiled", "Lowered", "Traced", "public_aval"]


def public_aval(aval: SpyreType | HostAval) -> Any:
    """A Spyre type, or a host leaf's ``jax.ShapeDtypeStruct``."""
    return aval if isinstance(aval, SpyreType) else aval.struct()


class Traced:
    """A function traced for one input signature, ready to lower (``jax.stages.Traced``).

    Attributes:
        jaxpr: the function traced with plain JAX (a ``ClosedJaxpr``), before layouts.
        fun_name: the function's name.
        in_tree: the pytree structure of ``(args, kwargs)``, static arguments left out.
        out_tree: the output pytree structure.
    """

    def __init__(
        self,
        jaxpr: ClosedJaxpr,
        fun_name: str,
        in_tree: Any,
        in_avals: tuple[Any, ...],
        out_tree: Any,
        lower: Callable[[], Lowering],
    ) -> None:
        self.jaxpr = jaxpr
        self.fun_name = fun_name
        self.in_tree = in_tree
        self.out_tree = out_tree
        self._in_avals = in_avals
        self._lower = lower

    @property
    def in_avals(self) -> Any:
        """The inputs' abstract values in the ``(args, kwargs)`` structure.

        Spyre types for Spyre arrays; ``jax.ShapeDtypeStruct`` for host leaves, with the
        dtype and weak type ``jax.jit`` gives them.
        """
        return jax.tree.unflatten(self.in_tree, [public_aval(a) for a in self._in_avals])

    @property
    def out_avals(self) -> Any:
        """The outputs' abstract values (shapes and dtypes) in the output structure."""
        return jax.tree.unflatten(self.out_tree, self.jaxpr.out_avals)

    @property
    def out_info(self) -> Any:
        """The outputs' shapes and dtypes (``jax.ShapeDtypeStruct``), as ``jax.stages``."""
        structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in self.jaxpr.out_avals]
        return jax.tree.unflatten(self.out_tree, structs)

    def lower(self) -> Lowered:
        """Plan the layouts: a :class:`Lowered` (cached per signature)."""
        return Lowered(self._lower())


class _Stage:
    """What the planned stages share: the lowering, its types and pytree structures."""

    def __init__(self, lowering: Lowering) -> None:
        self._lowering = lowering
        self.out_types = lowering.out_types
        self.in_tree = lowering.in_tree
        self.out_tree = lowering.out_tree

    @property
    def in_avals(self) -> Any:
        """The inputs' abstract values (see :attr:`Lowering.in_info`)."""
        return self._lowering.in_info

    @property
    def out_info(self) -> Any:
        """The outputs' Spyre types in the output structure."""
        return self._lowering.out_info


class Lowered(_Stage):
    """A function planned for the Spyre emulator for one input signature.

    The counterpart of ``jax.stages.Lowered``: :meth:`as_text` is the Spyre-level
    jaxpr (a layout on every value) and :meth:`compile` compiles it ahead of time.

    Attributes:
        plan: the planner's decisions (``plan.cost``: elements its restickifies and
            copies move).
        graph: the function's flattened graph, as planned.
        out_types: the outputs' Spyre types, flat.
        in_tree: the pytree structure of ``(args, kwargs)``, static arguments left out.
        out_tree: the output pytree structure.
    """

    def __init__(self, lowering: Lowering) -> None:
        super().__init__(lowering)
        self.plan = lowering.plan
        self.graph = lowering.graph

    def as_text(self, machine: Machine | None = None) -> str:
        """The Spyre-level jaxpr: every Spyre primitive, the layout of every value.

        The device model plans the program on ``machine`` (default ``Machine.spyre()``):
        a value it keeps in LX shows where (``@LX[c0:32]+0x4000``: the LX of cores
        0..31, at that byte of each); a value with no ``@`` lives in DDR.

        Raises:
            DeviceError: for a ``with_division`` hint the device model cannot follow.
        """
        return self._lowering.residency_jaxpr(machine)[0].pretty_print(use_color=False)

    @gc_paused
    def compile(self) -> Compiled:
        """Compile ahead of time: a :class:`Compiled`, called with the same arguments."""
        lo = [
            jax.ShapeDtypeStruct(a.layout.device_size, a.dtype)
            if isinstance(a, SpyreType)
            else a.struct()
            for a in self._lowering.in_avals
        ]
        return Compiled(self._lowering, self._lowering.on_images.lower(*lo).compile())


class Compiled(_Stage):
    """A function compiled for one input signature (``jax.stages.Compiled``).

    Called with the arguments it was lowered for, static arguments left out (as with
    ``jax.jit(f).lower(...).compile()``), on concrete arrays only: under ``jax.jit``,
    ``jax.grad`` or ``jax.vmap``, call the :func:`spyrejax.jit` function itself.

    Attributes:
        out_types: the outputs' Spyre types, flat.
        in_tree: the pytree structure of ``(args, kwargs)`` it takes.
        out_tree: the output pytree structure.
    """

    def __init__(self, lowering: Lowering, executable: Any) -> None:
        super().__init__(lowering)
        self._executable = executable

    def as_text(self) -> str:
        """The XLA program it runs on the device images (``jax.stages.Compiled.as_text``)."""
        return self._executable.as_text()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, tree = jax.tree.flatten((list(args), kwargs))
        leaves, _ = unwrap_keys(leaves)
        if tree != self.in_tree:
            raise SpyreTypeError(
                f"Compiled: called with arguments {tree}, but compiled for {self.in_tree} "
                "(static arguments are left out)"
            )
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            raise SpyreTypeError(
                "Compiled: cannot run under a JAX transformation (got a tracer); call the "
                "spyrejax.jit function itself under jax.jit, jax.grad or jax.vmap"
            )
        if _x64.active():  # 64-bit leaves held in 32 bits, as a call holds them (_x64)
            leaves = _x64.narrow_leaves(leaves, lambda i: f"leaf {i}")
            with _x64.off():
                return self._run(leaves)
        return self._run(leaves)

    def _run(self, leaves: list[Any]) -> Any:
        want = self._lowering.in_avals
        for i, (x, aval) in enumerate(zip(leaves, want, strict=True)):
            try:
                got = leaf_aval(x)
            except TypeError:
                raise SpyreTypeError(
                    f"Compiled: argument leaf {i} is a {type(x).__name__}, not an array"
                ) from None
            if got != aval:
                raise SpyreTypeError(
                    f"Compiled: argument leaf {i} is {_describe(got)}, but it was compiled "
                    f"for {_describe(aval)}"
                )
        outs = self._lowering.run_on_images(leaves, self._executable)
        return jax.tree.unflatten(self.out_tree, outs)


def _describe(aval: SpyreType | HostAval) -> str:
    if isinstance(aval, SpyreType):
        return aval.str_short()
    weak = " (weakly typed: a Python scalar)" if aval.weak_type else ""
    return f"a host array {np.dtype(aval.dtype).name}{list(aval.shape)}{weak}"
