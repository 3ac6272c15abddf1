"""spyrejax's modules import each other in one direction: no import cycle."""

import ast
from pathlib import Path

import spyrejax

ROOT = Path(spyrejax.__file__).parent


def _module_name(path):
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _typing_only(tree):
    """The nodes under ``if TYPE_CHECKING:`` blocks of a module (never run)."""
    blocks = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.If)
        and isinstance(n.test, ast.Name | ast.Attribute)
        and ast.unparse(n.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
    ]
    return {id(m) for b in blocks for s in b.body for m in ast.walk(s)}


def _imports(path, modules, *, typing=True):
    """Modules of spyrejax that ``path`` imports anywhere in it (functions included).

    ``typing=False`` leaves out the imports under ``if TYPE_CHECKING:``: they name a
    type for annotations and the type checker, and never run (``from __future__ import
    annotations`` keeps every annotation a string), so they are no runtime dependency.
    """
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    tree = ast.parse(path.read_text())
    skipped = set() if typing else _typing_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import mod`` imports the module pkg.mod where there is one.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def _graph(*, typing=True):
    paths = sorted(ROOT.rglob("*.py"))
    # C and C++ extensions are modules too (``from . import _transpose``), with no imports
    # of ours.
    modules = {_module_name(p) for p in [*paths, *ROOT.rglob("*.c"), *ROOT.rglob("*.cc")]}
    # The package itself is the public API on top of everything: importing a submodule
    # runs it first by Python's rules, which is not a dependency of that submodule.
    return {
        _module_name(p): _imports(p, modules, typing=typing) - {"spyrejax"}
        for p in paths
        if _module_name(p) != "spyrejax"
    }


def _cycle(graph):
    """One import cycle as a list of modules, or None."""
    state = {}

    def visit(m, stack):
        state[m] = "open"
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                return [*stack[stack.index(n) :], n]
            if n not in state and (found := visit(n, [*stack, n])):
                return found
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m, [m])):
            return found
    return None


def test_the_import_graph_has_no_cycle():
    # Imports that run: a type named for annotations only (``if TYPE_CHECKING:``) is no
    # runtime dependency, so two modules whose classes name each other in signatures
    # (``SpyreTensorLayout.for_host -> HostMapping``, ``HostMapping.layout``) may each
    # name the other's type, as long as only one imports the other when run. The layer
    # rule below still counts typing imports: a type from a layer above is still a
    # dependency on it.
    graph = _graph(typing=False)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_typing_only_imports_are_found():
    source = (
        "from typing import TYPE_CHECKING\n"
        "import typing\n"
        "if TYPE_CHECKING:\n    from a import b\n"
        "if typing.TYPE_CHECKING:\n    import c\n"
        "import d\n"
    )
    tree = ast.parse(source)
    skipped = _typing_only(tree)
    names = {
        a.name if isinstance(n, ast.Import) else n.module
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in skipped
        for a in n.names
    }
    assert names == {"typing", "d"}


def test_the_cycle_finder_finds_cycles():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


# The layers, bottom up: a module imports only from its own layer and those below it.
# A module belongs to the longest layer name that prefixes it; a package's ``__init__``
# may also import its own sub-packages (it re-exports them).
LAYERS = (
    "spyrejax._errors",
    "spyrejax._counts",
    "spyrejax._jax",
    "spyrejax.layout",
    "spyrejax.dma",
    "spyrejax.device",  # pure Python/NumPy planning: imports no primitive
    "spyrejax.primitives",  # each divided primitive builds its own iteration space
    "spyrejax.lowering",  # the graph, the rule registry, the planner
    "spyrejax.lowering.program",  # the interpreter and the device model applied to a plan
    "spyrejax.lowering.rules",  # the rules by family (control flow runs the interpreter)
    "spyrejax.frontend",  # spyrejax.jit and its stages
    "spyrejax.report",  # explain and export
    "spyrejax.viz",
    "spyrejax._demo",
    "spyrejax.__main__",
)


def _layer(module):
    names = [n for n in LAYERS if module == n or module.startswith(n + ".")]
    assert names, f"{module} is in no layer: add its package to LAYERS"
    return LAYERS.index(max(names, key=len))


def _is_package(module):
    return (ROOT.parent / module.replace(".", "/") / "__init__.py").exists()


def test_every_import_points_down_the_layers():
    up = []
    for module, imported in _graph().items():
        for target in imported:
            inside = _is_package(module) and target.startswith(module + ".")
            if _layer(target) > _layer(module) and not inside:
                up.append(f"{module} -> {target}")
    assert not up, "imports pointing up the layers: " + ", ".join(sorted(up))


def test_every_package_is_a_layer():
    packages = {p.parent for p in ROOT.rglob("__init__.py")} - {ROOT}
    names = {_module_name(p / "__init__.py") for p in packages}
    assert names <= set(LAYERS), names - set(LAYERS)


# tests/ folders that are no package's: the public API as a whole, whole models, the
# project itself (docs, tools, notebooks), the type checker's input, and data.
_TEST_ONLY_FOLDERS = {"api", "models", "project", "typecheck", "peer_ops_lists"}


def test_the_test_folders_mirror_the_package():
    tests = ROOT.parent / "tests"
    packages = {p.parent.relative_to(ROOT) for p in ROOT.rglob("__init__.py")} - {Path()}
    folders = {p.relative_to(tests) for p in tests.rglob("*") if p.is_dir()}
    folders = {f for f in folders if not any(p.startswith((".", "__")) for p in f.parts)}
    assert packages <= folders, f"no tests folder for {sorted(map(str, packages - folders))}"
    extra = {f for f in folders - packages if f.parts[0] not in _TEST_ONLY_FOLDERS}
    assert not extra, f"tests folders with no package: {sorted(map(str, extra))}"


def test_the_layout_core_imports_no_jax():
    core = (
        "spyrejax.layout._layout",
        "spyrejax.layout._host_mapping",
        "spyrejax.layout._segments",
        "spyrejax.layout._dtypes",
        "spyrejax.dma._dci",
    )
    for path in ROOT.rglob("*.py"):
        if _module_name(path) in core:
            tree = ast.parse(path.read_text())
            names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
            names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
            assert not any(x == "jax" or x.startswith("jax.") for x in names), path


# The parameters that hold a jaxpr's structure: hijax's primitive of an equation, the
# bodies of calls, loops, branches and shard_map, a loop's operand counts. Only
# spyrejax/_jax.py names them (``hi_prim``, ``scan_parts``, ``with_bodies``...), so a
# JAX upgrade that renames one changes one file and fails its tests, not seven modules.
_STRUCTURE = frozenset(
    {
        "_prim",
        "jaxpr",
        "call_jaxpr",
        "fun_jaxpr",
        "cond_jaxpr",
        "body_jaxpr",
        "branches",
        "cond_nconsts",
        "body_nconsts",
        "num_consts",
        "num_carry",
        "ft_in",
        "ft_out",
    }
)


def test_only_the_jax_module_reads_jaxpr_structure():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == ROOT / "_jax.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in _STRUCTURE:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not found, "read through spyrejax._jax instead: " + ", ".join(found)


# JAX's APIs without a compatibility promise: its internals, experimental and extension
# APIs, and the interpreters. spyrejax/_jax.py alone imports them, so a JAX upgrade that
# moves one breaks one file at import.
_UNSTABLE_JAX = ("jax._src", "jax.experimental", "jax.extend", "jax.interpreters")


def test_only_the_jax_module_imports_unstable_jax_api():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == ROOT / "_jax.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            if any(n == u or n.startswith(u + ".") for n in names for u in _UNSTABLE_JAX):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, "import it through spyrejax._jax instead: " + ", ".join(found)


def test_rules_are_registered_one_way():
    """Every lowering rule goes into ``RULES`` through the registry's ``_register``."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for t in targets:
                if isinstance(t, ast.Subscript) and ast.unparse(t.value) == "RULES":
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    elsewhere = [f for f in found if not f.startswith("lowering/_registry.py:")]
    assert found and not elsewhere, "register with _registry._register: " + ", ".join(elsewhere)
