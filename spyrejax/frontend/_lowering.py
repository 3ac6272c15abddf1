"""A lowering: what ``spyrejax.jit`` builds for one input signature, and how it runs.

A :class:`Lowering` holds the user's function traced with plain JAX, its graph, the
plan, the interpreter and its ``jax.jit`` compilations, for one :class:`Signature` (the
key of the cache ``spyrejax.jit`` keeps them in); it runs calls (concrete, traced,
vmapped, differentiated) and gives the Spyre-level jaxpr, the record of its trace and
the residencies of its values.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax

from .._jax import AD_TRACERS, BatchTracer, ClosedJaxpr, Var
from ..device import DeviceProgram, Machine, default_machine
from ..lowering._graph import Graph, Value
from ..lowering._planner import Plan
from ..lowering.program._annotated import residency_jaxpr
from ..lowering.program._cores import CoreCheck
from ..lowering.program._interpret import Interpreter
from ..lowering.program._record import Recorder, recording
from ..primitives import abstract, image, to_device, to_host
from ..primitives._array import SpyreArray, SpyreType
from ._arguments import (
    HostAval,
)
from ._gc import gc_paused
from ._outer_ad import vjp_function, with_own_derivatives
from ._stages import public_aval
from ._vmap import can_batch_whole, vmapped_call

__all__ = ["Lowering", "Signature"]


@dataclass(frozen=True)
class Signature:
    """What one compiled computation is specialised to: the key of the cache.

    Attributes:
        static: ``(index or name, type, value)`` of each static argument.
        in_tree: the dynamic arguments' pytree structure (``(args, kwargs)``).
        in_avals: the flat dynamic leaves' abstract values.
        context: the JAX configuration ``jax.jit`` keys its traces on (x64, dtype
            promotion...): another one traces again.
        keys: ``(leaf index, key implementation)`` of PRNG key leaves, which travel as
            their key data.
        check: the per-core check active when called (``checking_cores``), or None.
    """

    static: tuple[tuple[Any, ...], ...]
    in_tree: Any
    in_avals: tuple[SpyreType | HostAval, ...]
    context: Any
    keys: tuple[tuple[int, Any], ...] = ()
    check: CoreCheck | None = None


@dataclass
class Lowering:
    """Everything spyrejax.jit built for one input signature (cached per signature).

    Attributes:
        jaxpr: the user's function traced with plain JAX.
        graph: its flattened graph.
        plan: the planner's decisions.
        interpreter: runs the plan with Spyre primitives.
        compiled: ``jax.jit`` of the interpreter (Spyre arrays in and out).
        in_tree: the input pytree structure (``(args, kwargs)``, static arguments left out).
        in_avals: the flat inputs' abstract values (Spyre types, or host shapes and dtypes).
        out_tree: the output pytree structure.
        on_images: ``jax.jit`` of the interpreter on device images (see
            :meth:`run_on_images`).
        out_types: the outputs' Spyre types, as planned.
        make_jit: makes a ``spyrejax.jit`` function (``SpyreJit``, whose module builds
            lowerings): of the batched function under ``jax.vmap``, and of the VJP.
    """

    jaxpr: ClosedJaxpr
    graph: Graph
    plan: Plan
    interpreter: Interpreter
    compiled: Callable[..., Any]
    in_tree: Any
    in_avals: tuple[Any, ...]
    out_tree: Any
    on_images: Callable[..., Any]
    out_types: list[SpyreType]
    make_jit: Callable[[Callable[..., Any]], Any]

    def run_on_images(
        self, leaves: Sequence[Any], run: Callable[..., Any] | None = None
    ) -> list[SpyreArray]:
        """Run on concrete leaves: images in, images out, wrapped back into SpyreArrays.

        ``run`` replaces :attr:`on_images` (an ahead-of-time compiled executable of it).
        """
        lo = [x.image if isinstance(x, SpyreArray) else x for x in leaves]
        outs = (run or self.on_images)(*lo)
        return [SpyreArray(o, t) for o, t in zip(outs, self.out_types, strict=True)]

    def call_concrete(self, leaves: Sequence[Any], run: Callable[..., Any] | None = None) -> Any:
        """:meth:`call` of leaves known concrete (no tracers), the results unchecked.

        The dispatch fast path: the compiled program's results are the planned types'
        images by construction (the interpreter checked every type when it was traced).
        ``run`` replaces :attr:`on_images` (:meth:`on_hosts`).
        """
        lo = [x.image if type(x) is SpyreArray else x for x in leaves]
        outs = (run or self.on_images)(*lo)
        if self._one_array:  # no structure to rebuild
            return SpyreArray.of_checked(outs[0], self.out_types[0])
        return self.out_tree.unflatten(map(SpyreArray.of_checked, outs, self.out_types))

    @functools.cached_property
    def _one_array(self) -> bool:
        """Whether the function returns one array (not in a container)."""
        return self.out_tree.num_nodes == 1 and self.out_tree.num_leaves == 1

    def call(self, leaves: Sequence[Any]) -> Any:
        """The outputs for flat inputs, in the output structure.

        Traced, a function with its own derivative rules (``custom_jvp``,
        ``custom_vjp``, ``stop_gradient``) runs under a ``jax.custom_vjp`` whose backward
        pass is ``spyrejax.jit`` of ``jax.vjp`` of the plain function (see
        ``_outer_ad``): ``jax.grad`` may be outside any other transformation
        (``jax.grad(jax.vmap(sj.jit(f)))``), so every traced call keeps the rules.
        """
        if self.graph.derivative_rules and any(isinstance(x, jax.core.Tracer) for x in leaves):
            outs = with_own_derivatives(
                self._flat_call, self.backward, leaves, self.in_avals, self.jaxpr.out_avals
            )
        else:
            outs = self._flat_call(leaves)
        return jax.tree.unflatten(self.out_tree, outs)

    @property
    def in_info(self) -> Any:
        """The inputs' abstract values in the ``(args, kwargs)`` structure.

        Spyre types for Spyre arrays; ``jax.ShapeDtypeStruct`` for host leaves (moved to
        the device with default layouts), with the dtype and weak type ``jax.jit``
        gives them.
        """
        return jax.tree.unflatten(self.in_tree, [public_aval(a) for a in self.in_avals])

    @property
    def out_info(self) -> Any:
        """The outputs' Spyre types in the output structure."""
        return jax.tree.unflatten(self.out_tree, self.out_types)

    def _flat_call(self, leaves: Sequence[Any]) -> list[Any]:
        if not any(isinstance(x, jax.core.Tracer) for x in leaves):
            return self.run_on_images(leaves)
        if (
            any(isinstance(x, BatchTracer) for x in leaves)
            and not any(isinstance(x, AD_TRACERS) for x in leaves)
            and can_batch_whole(self.out_types)
        ):  # jax.vmap: the batched function is planned whole (see _vmap)
            return vmapped_call(
                self.jaxpr, self.out_types, self.compiled, self._batched, self.make_jit, leaves
            )
        outs = self.compiled(*leaves)
        if any(isinstance(x, AD_TRACERS) for x in leaves):
            # jax.grad wants a plain scalar: a 0-d result comes out as one.
            outs = [to_host(o) if jax.typeof(o).shape == () else o for o in outs]
        return outs

    def on_hosts(self, moved: frozenset[int]) -> Callable[..., list[jax.Array]]:
        """:attr:`on_images` with the leaves at ``moved`` host arrays, moved in the program.

        A call with host arrays moves them into their default layouts (as
        ``frontend._dispatch`` plans it) inside the program that runs the call: one
        compile, where a program of its own for the move would be a second. Built once
        per set of moved leaves.
        """
        run = self._on_hosts.get(moved)
        if run is None:
            on_images = self.on_images

            def move_and_run(*lo: Any) -> list[jax.Array]:
                return on_images(
                    *[image(to_device(x)) if i in moved else x for i, x in enumerate(lo)]
                )

            run = self._on_hosts[moved] = jax.jit(move_and_run)
        return run

    @functools.cached_property
    def _on_hosts(self) -> dict[frozenset[int], Callable[..., list[jax.Array]]]:
        return {}

    @functools.cached_property
    def _batched(self) -> dict[tuple[Any, ...], Any]:
        """``spyrejax.jit`` of the vmapped function, per batch size and batched inputs."""
        return {}

    @functools.cached_property
    def _vjp(self) -> Any:
        return self.make_jit(vjp_function(self.jaxpr))

    def backward(self, primals: list[Any], cotangents: list[Any]) -> Any:
        """``spyrejax.jit`` of the plain function's VJP, with host results."""
        lowering, leaves = self._vjp._lowering(primals, cotangents)
        return jax.tree.unflatten(lowering.out_tree, lowering.on_host(*leaves))

    @functools.cached_property
    def on_host(self) -> Callable[..., list[jax.Array]]:
        """``jax.jit`` of the interpreter with its results moved to the host.

        Under ``jax.vmap`` a host result is batched as any array, where a Spyre
        result must have the batch dim outermost on the device.
        """
        return jax.jit(lambda *leaves: [to_host(o) for o in self.interpreter.run(*leaves)])

    @property
    def spyre_jaxpr(self) -> ClosedJaxpr:
        """The interpreter traced on the input types: a layout on every value."""
        return self._traced[0]

    @property
    def spyre_variables(self) -> dict[tuple[Value, SpyreType], Any]:
        """The variable of :attr:`spyre_jaxpr` holding each (graph value, planned type).

        The interpreter is traced once, with every value it computes as an extra
        result (then dropped): that says which variable holds which value.
        """
        return self._traced[1]

    @property
    def record(self) -> Recorder:
        """What the program binds, node run by node run (recorded by the same one trace)."""
        return self._traced[2]

    @functools.cached_property
    def _traced(self) -> tuple[ClosedJaxpr, dict[tuple[Value, SpyreType], Any], Recorder]:
        """The interpreter traced once: the Spyre-level jaxpr, its variables, its record.

        Every value the interpreter computes is an extra result (then dropped): that says
        which variable holds which value. Under ``emulate="cores"`` the jaxpr is the
        per-core program, recorded as it runs: the same primitives on the same types,
        each result the per-core executor's (a variable of that jaxpr).
        """
        keys: list[tuple[Value, SpyreType]] = []
        interpreter = self.interpreter.unchecked()

        def run(*args: Any) -> list[Any]:
            env: dict[tuple[Value, SpyreType], Any] = {}
            outs = interpreter.run(*args, env=env)
            keys.extend(env)
            return [*outs, *env.values()]

        args = [abstract(a) for a in self.in_avals]
        with recording(executes=interpreter.emulate is not None) as rec:
            closed = jax.make_jaxpr(run)(*args)
        outvars = closed.jaxpr.outvars
        n = len(outvars) - len(keys)
        variables = {k: v for k, v in zip(keys, outvars[n:], strict=True) if isinstance(v, Var)}
        return closed.replace(outvars=outvars[:n]), variables, rec

    @gc_paused
    def residency_jaxpr(self, machine: Machine | None = None) -> tuple[ClosedJaxpr, DeviceProgram]:
        """The Spyre-level jaxpr with the values kept in LX marked, and the device program.

        The device model plans the program on ``machine`` (default ``Machine.spyre()``);
        each value its LX plan keeps in LX has that :class:`~spyrejax.Residency` on its
        type (``@LX[c0:32]+0x0``); the others live in DDR. Inner jaxprs (loop,
        branch and ``shard_map`` bodies) are not annotated.

        Planned once per machine (``explain`` and ``as_text`` of one lowering share it).
        """
        key = default_machine(machine)
        if key not in self._residency:
            closed, variables, rec = self._traced
            self._residency[key] = residency_jaxpr(
                closed, variables, self.graph, self.plan, rec, key
            )
        return self._residency[key]

    @functools.cached_property
    def _residency(self) -> dict[Machine, tuple[ClosedJaxpr, DeviceProgram]]:
        return {}
