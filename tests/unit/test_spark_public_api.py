"""The Spark bridge is a user of the broker like any other: every module under spark_bridge/ reaches
ray_broker through its public API only (`ray_broker`'s `__all__`, `ray_broker.aio`,
`ray_broker.errors`), read from the source with `ast`: no Spark, no Ray."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ray_broker
import ray_broker.errors

ROOT = Path(__file__).resolve().parents[2]
BRIDGE = ROOT / "spark_bridge"


def _literal_all(path: Path) -> set[str]:
    """A module's `__all__`, read from its source (`ray_broker.aio` is not imported: it loads Ray)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"{path} has no __all__")


PUBLIC_MODULES = {
    "ray_broker": set(ray_broker.__all__),
    "ray_broker.aio": _literal_all(ROOT / "ray_broker" / "aio" / "__init__.py"),
    "ray_broker.errors": set(ray_broker.errors.__all__),
}
"""The ray_broker modules a user may import, and the names each offers."""


def _names_in_module(name: str) -> set[str] | None:
    """The public names of a public ray_broker module; None for any other ray_broker module."""
    return PUBLIC_MODULES.get(name)


def non_public_uses(source: str) -> list[str]:
    """What a module's source takes from ray_broker beyond the public API, one line each:
    imports of other ray_broker modules (lazy ones inside functions included), names imported
    from a public module that it does not export, and attributes of an imported public module
    (`rb.X`) that it does not export."""
    problems: list[str] = []
    aliases: dict[str, str] = {}          # local name -> public module it is bound to
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "ray_broker":
                    continue
                if _names_in_module(alias.name) is None:
                    problems.append(f"line {node.lineno}: import {alias.name}")
                elif alias.asname is not None:
                    aliases[alias.asname] = alias.name
                else:
                    aliases["ray_broker"] = "ray_broker"   # `import ray_broker.aio` binds ray_broker
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None \
                and node.module.split(".")[0] == "ray_broker":
            offered = _names_in_module(node.module)
            if offered is None:
                problems.append(f"line {node.lineno}: from {node.module} import ...")
                continue
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule in PUBLIC_MODULES:
                    aliases[alias.asname or alias.name] = submodule
                elif alias.name not in offered:
                    problems.append(f"line {node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Call) and _called_name(node.func) in ("import_module", "__import__") \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
                and node.args[0].value.split(".")[0] == "ray_broker" and node.args[0].value not in PUBLIC_MODULES:
            problems.append(f"line {node.lineno}: imports {node.args[0].value} dynamically")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            module = aliases[node.value.id]
            full = f"{module}.{node.attr}"
            if full not in PUBLIC_MODULES and node.attr not in PUBLIC_MODULES[module]:
                problems.append(f"line {node.lineno}: {node.value.id}.{node.attr} is not public ({module})")
    return problems


def _called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


MODULES = sorted(BRIDGE.rglob("*.py"))


def test_the_bridge_has_modules_to_check() -> None:
    assert {p.name for p in MODULES} >= {"batch_sending.py", "rows.py", "datasource.py", "session.py", "streaming.py"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(BRIDGE)))
def test_spark_bridge_uses_the_public_api_only(path: Path) -> None:
    assert non_public_uses(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(("source", "problem"), [
    ("from ray_broker.routing import partition_for_key", "from ray_broker.routing import ..."),
    ("def f():\n    from ray_broker.client.sending import SenderBase", "from ray_broker.client.sending import ..."),
    ("import ray_broker.message", "import ray_broker.message"),
    ("import ray_broker.heap as heap", "import ray_broker.heap"),
    ("from ray_broker import heap", "from ray_broker import heap"),
    ("from ray_broker import codec", "from ray_broker import codec"),
    ("from ray_broker.errors import Any", "from ray_broker.errors import Any"),
    ("import ray_broker as rb\nrb.routing.partition_of(1)", "rb.routing is not public"),
    ("import ray_broker as rb\nrb.message.envelope_from_wire({})", "rb.message is not public"),
    ("import ray_broker.aio as rba\nrba.handle.Namespace", "rba.handle is not public"),
    ("import importlib\nimportlib.import_module('ray_broker.protocol')", "imports ray_broker.protocol dynamically"),
])
def test_the_check_finds_internal_uses(source: str, problem: str) -> None:
    found = non_public_uses(source)
    assert len(found) == 1 and problem in found[0], found


def test_the_check_lets_public_uses_pass() -> None:
    source = ("import ray_broker as rb\nimport ray_broker.aio as rba\nfrom ray_broker import errors, Message\n"
              "from ray_broker.errors import InvalidArgumentError\n"
              "rb.partition_of(1); rb.encode_messages([b'x']); rb.errors.ServiceBusError; rba.Namespace\n"
              "errors.InvalidArgumentError\n")
    assert non_public_uses(source) == []
