"""``wire`` is sans-IO: importing it must not pull in any networking stack.

The hub, the SDK, the CLI and tests all share this package; if it imported
trio or a socket module it would drag an event loop into every one of them
(and into PySpark executors, which only need to parse bytes).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

WIRE_DIR = Path(__file__).resolve().parent.parent / "wire"
FORBIDDEN = ("socket", "ssl", "trio", "anyio", "libp2p", "asyncio", "selectors")
#: Every source file of the package, subpackages (wire/frames/) included.
WIRE_FILES = sorted(WIRE_DIR.rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(WIRE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules_to_import() -> list[str]:
    # Every submodule, including ones added later (wire.cli was written separately).
    return sorted(_module_name(p) for p in WIRE_FILES if p.stem != "__main__")


def test_wire_modules_found() -> None:
    # Guards the test below against a wrong path silently importing nothing.
    modules = _modules_to_import()
    assert {"wire", "wire.decoder", "wire.frames", "wire.frames.mesh_v1", "wire.schema"} <= set(modules)


def test_importing_wire_loads_no_networking_stack() -> None:
    modules = _modules_to_import()
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=WIRE_DIR.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    loaded = set(json.loads(result.stdout))
    assert set(modules) <= loaded
    offenders = sorted(m for m in loaded if m.split(".")[0] in FORBIDDEN or m.split(".")[0] == "_socket")
    assert offenders == [], f"wire imports networking modules: {offenders}"


def test_detector_sees_a_networking_import() -> None:
    # The subprocess check must be able to fail: importing socket shows up.
    result = subprocess.run(
        [sys.executable, "-c", "import json, sys, socket; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "socket" in json.loads(result.stdout)


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            roots.add(node.args[0].value.split(".")[0])
    return roots


@pytest.mark.parametrize("path", WIRE_FILES, ids=lambda p: str(p.relative_to(WIRE_DIR)))
def test_no_networking_import_in_source(path: Path) -> None:
    # Static as well as dynamic: an import inside a function that the runtime
    # check never executes is still caught here.
    offenders = _imported_roots(path) & set(FORBIDDEN)
    assert not offenders, f"{path.relative_to(WIRE_DIR)} imports {sorted(offenders)}"
