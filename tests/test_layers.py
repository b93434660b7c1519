"""The import rules between and inside the packages, read from the source with ``ast``.

``sdk`` and ``hub`` never import each other (tests may import both): tools start hubs only as
processes.  No package has import circles.  Inside ``hub/`` the layers point one way
(docs/architecture.md): storage <- core <- shell <- app; storage imports only ``wire``
and the standard library, the core no trio, socket or libp2p.

Every import counts -- at the top, inside a function, under ``if TYPE_CHECKING:`` -- and so
does a module named by a string to ``importlib``: ``import_module("hub.cli")`` is an import
too, even when the name is looked up in a table first.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Calls that import the module named by their first argument.
IMPORT_CALLS = {"import_module", "__import__", "find_spec"}
DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


@dataclass(frozen=True)
class Import:
    importer: str  #: the importing module, e.g. ``sdk.cli.commands``
    line: int
    target: str  #: the absolute name imported, e.g. ``hub.cli`` (or ``sdk.tools.stopping.run_trio``)

    def __str__(self) -> str:
        return f"{self.importer} (line {self.line}) imports {self.target}"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def imports_of(path: Path, module: str) -> Iterator[Import]:
    """Every import in ``path`` (module ``module``), relative ones made absolute."""
    # The package relative imports start from: the module itself for an __init__.py.
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    named_by_computed_string = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                # One dot is the module's own package; each further dot goes one package up.
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield Import(module, node.lineno, f"{base}.{alias.name}")
        elif isinstance(node, ast.Call) and _called_name(node.func) in IMPORT_CALLS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield Import(module, node.lineno, first.value)
            else:
                named_by_computed_string = True
    if named_by_computed_string:
        # The name comes from a table or a variable: every dotted name written in the file may be it.
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED_NAME.fullmatch(node.value):
                yield Import(module, node.lineno, node.value)


def _called_name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def test_sdk_and_hub_never_import_each_other() -> None:
    crossings = [
        str(imp)
        for package in ("sdk", "hub")
        for path in source_files(package)
        for imp in imports_of(path, module_name(path))
        if imp.target.split(".")[0] == ("hub" if package == "sdk" else "sdk")
    ]
    assert not crossings, "sdk and hub import each other:\n" + "\n".join(crossings)


def test_the_rule_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Type-only, function-local and importlib imports, by literal or through a table, all count."""
    source = tmp_path / "probe.py"
    source.write_text(
        "import importlib\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from hub.server import HubServer\n"
        "def run():\n"
        "    import hub.mesh.host\n"
        "    importlib.import_module('hub.config')\n"
        "TABLE = {'hub': ('hub.cli', 'run a hub')}\n"
        "def dispatch(name):\n"
        "    return importlib.import_module(TABLE[name][0])\n"
    )
    targets = [imp.target for imp in imports_of(source, "probe")]
    assert {"hub.server.HubServer", "hub.mesh.host", "hub.config", "hub.cli"} <= set(targets), targets


# -- import circles -----------------------------------------------------------------------


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports.

    A name resolves to the longest module prefix that is a file (``sdk.client.Client`` ->
    ``sdk.client``).  A package's ``__init__`` re-exporting its children, and a child importing
    through an ancestor's ``__init__``, are not circles of design and are left out (as in
    ``../shared/tools/import_circles.py``).
    """
    paths = {module_name(path): path for path in source_files(package)}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        deps = set()
        for imp in imports_of(path, module):
            target = imp.target
            while target and target not in paths:
                target = target.rpartition(".")[0]
            if target and target != module:
                deps.add(target)
        is_package = path.name == "__init__.py"
        graph[module] = {
            dep
            for dep in deps
            if not (is_package and dep.startswith(module + "."))
            and not (paths[dep].name == "__init__.py" and module.startswith(dep + "."))
        }
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or around a loop (sorted)."""
    reach = {module: reachable(graph, module) for module in graph}
    groups = {
        frozenset([module, *(other for other in reach[module] if module in reach[other])])
        for module in graph
        if module in reach[module]
    }
    return sorted(sorted(group) for group in groups)


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    return seen


@pytest.mark.parametrize("package", ["hub", "sdk", "wire"])
def test_no_import_circles(package: str) -> None:
    found = circles(import_graph(package))
    assert not found, f"import circles in {package}/:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_circles_are_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": {"f", "a"}, "g": set()}
    assert circles(graph) == [["a", "b", "c"], ["d", "e"], ["f"]]


# -- the hub's layers ---------------------------------------------------------------------

#: Layers from the bottom, each a module prefix.  A module may import its own layer and those below.
HUB_LAYERS = [
    ("storage", ("hub.storage",)),
    ("core", ("hub.core",)),
    ("shell", ("hub.shell", "hub.mesh")),
    ("app", ("hub.app", "hub.cli", "hub.config", "hub.tools", "hub.__main__", "hub")),
]
#: What the core decides without: any of these imported in hub/core/ is I/O leaking in.
IO_MODULES = {"trio", "anyio", "asyncio", "socket", "selectors", "libp2p", "multiaddr", "ssl", "threading"}
#: Longest hub file before it is asked to be split (STYLE.md: "a file that passes ~400 lines is
#: asking to be split").
MAX_HUB_FILE_LINES = 420
#: Files allowed past the limit: each says at its top why (checked below).
LONG_HUB_FILES = {"hub/core/overlay/core.py": 620}


def hub_layer(module: str) -> int:
    """The index in :data:`HUB_LAYERS` of ``module`` (longest matching prefix wins)."""
    best, depth = -1, -1
    for index, (_name, prefixes) in enumerate(HUB_LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and prefix.count(".") > depth:
                best, depth = index, prefix.count(".")
    assert best >= 0, f"{module} is in no layer"
    return best


def hub_imports() -> Iterator[Import]:
    for path in source_files("hub"):
        yield from imports_of(path, module_name(path))


def test_hub_layers_only_import_downward() -> None:
    upward = []
    for imp in hub_imports():
        if imp.target.split(".")[0] != "hub" or imp.target == "hub":
            continue
        own, target = hub_layer(imp.importer), hub_layer(imp.target)
        if target > own:
            upward.append(f"{imp} ({HUB_LAYERS[own][0]} -> {HUB_LAYERS[target][0]})")
    assert not upward, "imports that point up the hub's layers:\n" + "\n".join(upward)


def test_storage_imports_only_wire_and_the_standard_library() -> None:
    import sys

    wrong = [
        str(imp)
        for imp in hub_imports()
        if imp.importer.startswith("hub.storage")
        and (top := imp.target.split(".")[0]) not in sys.stdlib_module_names
        and top not in ("wire", "__future__")
        and not imp.target.startswith("hub.storage")
    ]
    assert not wrong, "storage imports beyond wire and the standard library:\n" + "\n".join(wrong)


def test_the_core_decides_without_io() -> None:
    io = [
        str(imp)
        for imp in hub_imports()
        if imp.importer.startswith("hub.core") and imp.target.split(".")[0] in IO_MODULES
    ]
    assert not io, "the core imports I/O:\n" + "\n".join(io)


def test_hub_files_stay_short() -> None:
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in source_files("hub")}
    long = {name: n for name, n in lengths.items() if n > LONG_HUB_FILES.get(name, MAX_HUB_FILE_LINES)}
    assert not long, f"hub files over {MAX_HUB_FILE_LINES} lines: {long}"
    for name in LONG_HUB_FILES:
        assert "Why this file is long" in (ROOT / name).read_text(), f"{name} does not say why it is long"


def test_the_layer_rule_catches_an_upward_import(tmp_path: Path) -> None:
    assert hub_layer("hub.core.hub") < hub_layer("hub.shell.connection") < hub_layer("hub.app")
    assert hub_layer("hub.mesh.session") == hub_layer("hub.shell.loops")
    assert hub_layer("hub.storage.store") < hub_layer("hub.core.follower")
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hub.shell.connection import X\n")
    (imp,) = [i for i in imports_of(probe, "hub.core.probe") if i.target.startswith("hub.")]
    assert hub_layer(imp.target) > hub_layer(imp.importer)
