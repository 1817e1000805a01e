"""The package layout rules (see the README's map), checked on the source with `ast`:
SQL only in storage/, environment writes only in cli/, Dagster only in the Dagster face, resources and cli/."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hsi_dagster"

SQL_METHODS = {"execute", "executemany", "sql"}
SQL_ALLOWED = ("storage/",)

ENVIRON_WRITERS = {"update", "setdefault"}
ENVIRON_ALLOWED = ("cli/",)

DAGSTER_ALLOWED = (
    "definitions.py",
    "jobs.py",
    "sensors/",
    "partitions.py",
    "instance/",  # the instance's run queue, run launcher and run history (dagster.yaml)
    "assets/",
    "resources/",
    "cli/",
)


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        yield relative, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _allowed(relative: str, prefixes: tuple[str, ...]) -> bool:
    return any(relative == prefix or (prefix.endswith("/") and relative.startswith(prefix)) for prefix in prefixes)


def _is_os_environ(node: ast.expr, environ_names: set[str]) -> bool:
    """`os.environ`, or a bare name bound by `from os import environ`."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id in environ_names


def sql_calls(tree: ast.Module) -> list[str]:
    return [
        f"line {node.lineno}: .{node.func.attr}("
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SQL_METHODS
    ]


def environ_writes(tree: ast.Module) -> list[str]:
    environ_names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "os"
        for alias in node.names
        if alias.name == "environ"
    }
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            if isinstance(target, ast.Subscript) and _is_os_environ(target.value, environ_names):
                found.append(f"line {node.lineno}: os.environ[...] written")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if func.attr in ENVIRON_WRITERS and _is_os_environ(func.value, environ_names):
                found.append(f"line {node.lineno}: os.environ.{func.attr}(")
            if func.attr == "putenv" and isinstance(func.value, ast.Name) and func.value.id == "os":
                found.append(f"line {node.lineno}: os.putenv(")
    return found


def _is_dagster(module: str) -> bool:
    top = module.split(".")[0]
    return top == "dagster" or top.startswith("dagster_")


def dagster_imports(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if _is_dagster(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _is_dagster(node.module):
            found.append(f"line {node.lineno}: from {node.module} import ...")
    return found


def _violations(check, allowed: tuple[str, ...]) -> dict[str, list[str]]:
    return {
        relative: found for relative, tree in _sources() if not _allowed(relative, allowed) and (found := check(tree))
    }


def test_sql_is_executed_only_in_storage() -> None:
    assert _violations(sql_calls, SQL_ALLOWED) == {}


def test_only_cli_writes_the_environment() -> None:
    assert _violations(environ_writes, ENVIRON_ALLOWED) == {}


def test_dagster_is_imported_only_by_the_dagster_face_resources_and_cli() -> None:
    assert _violations(dagster_imports, DAGSTER_ALLOWED) == {}


def test_the_checks_find_what_they_look_for() -> None:
    """Each check on a snippet that breaks its rule, so an empty result above means something."""
    assert sql_calls(ast.parse("conn.execute('SELECT 1')\nrel.sql('x')\ncur.executemany('x', [])")) == [
        "line 1: .execute(",
        "line 2: .sql(",
        "line 3: .executemany(",
    ]
    snippet = (
        "import os\nfrom os import environ as env\n"
        "os.environ['A'] = '1'\nenv['B'] = '2'\nos.environ.update(C='3')\nos.environ.setdefault('D', '4')\n"
        "os.putenv('E', '5')\ndel os.environ['A']\nos.environ.get('F')\n"
    )
    assert len(environ_writes(ast.parse(snippet))) == 6
    assert dagster_imports(ast.parse("import dagster as dg\nfrom dagster_duckdb import X\nimport dagsterish")) == [
        "line 1: import dagster",
        "line 2: from dagster_duckdb import ...",
    ]
