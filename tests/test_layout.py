"""The package layout rules (see the README's map), checked on the source with `ast`: SQL (calls and text) only in
storage/, environment writes only in cli/, Dagster only in the Dagster face, resources and cli/, core/ pure (no
DuckDB, HTTP, Dagster or file I/O), and the module import graph layered and free of cycles. The README's map names
every package module and test folder and only paths that exist; the README stays under 400 lines without dates.

`.venv/bin/pytest tests/test_layout.py -q` is the command; each failure names the module, the line and the rule.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hsi_dagster"

SQL_METHODS = {"execute", "executemany", "sql", "query"}
SQL_ALLOWED = ("storage/",)
# SQL text: a statement's keywords in capitals, as every statement in storage/ is written (so prose such as "select
# the model from the list" does not count); docstrings are skipped, every other string and f-string is read.
SQL_TEXT = re.compile(
    r"\b(SELECT\b[\s\S]*\bFROM\b|INSERT\s+(OR\s+\w+\s+)?INTO\b|UPDATE\s+\w+\s+SET\b|DELETE\s+FROM\b"
    r"|CREATE\s+(OR\s+REPLACE\s+)?(TEMP\s+|TEMPORARY\s+|UNIQUE\s+)?(TABLE|VIEW|INDEX|SEQUENCE|MACRO|SCHEMA)\b"
    r"|DROP\s+(TABLE|VIEW|INDEX|SEQUENCE|MACRO|SCHEMA)\b|ALTER\s+TABLE\b|PRAGMA\s+\w+|ATTACH\s+"
    r"|COPY\s+\w+\s+(TO|FROM)\b)",
)

ENVIRON_WRITERS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__", "__ior__"}
OS_ENVIRON_FUNCTIONS = {"putenv", "unsetenv"}
ENVIRON_ALLOWED = ("cli/",)

DAGSTER_ALLOWED = (
    "definitions.py",
    "jobs.py",
    "sensors/",
    "partitions.py",
    "instance/",  # the instance's run queue, run launcher and run history (dagster.yaml)
    "assets/",
    "resources/",
    "evaluation/",  # the evaluation engine runs passes on the `llm` resource (and tears its own copies down)
    "cli/",
)


def _sources() -> Iterator[tuple[str, ast.Module]]:
    yield from _parsed()


@functools.cache
def _parsed() -> tuple[tuple[str, ast.Module], ...]:
    """Every module of the package, parsed once per session."""
    return tuple(
        (path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
    )


def _allowed(relative: str, prefixes: tuple[str, ...]) -> bool:
    return any(relative == prefix or (prefix.endswith("/") and relative.startswith(prefix)) for prefix in prefixes)


def _is_os_environ(node: ast.expr, environ_names: set[str]) -> bool:
    """`os.environ`, or a bare name bound to it (`from os import environ`, `env = os.environ`)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id in environ_names


def _environ_names(tree: ast.Module) -> set[str]:
    names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "os"
        for alias in node.names
        if alias.name == "environ"
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _is_os_environ(node.value, names):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return names


def sql_calls(tree: ast.Module) -> list[str]:
    return [
        f"line {node.lineno}: .{node.func.attr}("
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SQL_METHODS
    ]


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring nodes (module, class, function): prose, not SQL."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def sql_text(tree: ast.Module) -> list[str]:
    """Strings and f-strings (their literal parts joined) that read as a SQL statement."""
    skip = _docstrings(tree)
    inside_fstrings = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = " ? ".join(p.value for p in node.values if isinstance(p, ast.Constant) and isinstance(p.value, str))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip | inside_fstrings:
            text = node.value
        else:
            continue
        if match := SQL_TEXT.search(text):
            found.append(f"line {node.lineno}: SQL text {match.group(0)[:40]!r}")
    return found


def environ_writes(tree: ast.Module) -> list[str]:
    """Every way of changing the process environment: item assignment or deletion, the mapping's mutating
    methods, `|=`, and os.putenv / os.unsetenv."""
    environ_names = _environ_names(tree)
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
            elif isinstance(node, ast.AugAssign) and _is_os_environ(target, environ_names):
                found.append(f"line {node.lineno}: os.environ updated in place")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if func.attr in ENVIRON_WRITERS and _is_os_environ(func.value, environ_names):
                found.append(f"line {node.lineno}: os.environ.{func.attr}(")
            if func.attr in OS_ENVIRON_FUNCTIONS and isinstance(func.value, ast.Name) and func.value.id == "os":
                found.append(f"line {node.lineno}: os.{func.attr}(")
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


# core/ is pure: what it may not import, and the calls that read or write files (on a Path, a file object or os).
CORE = "core/"
CORE_FORBIDDEN_IMPORTS = (
    "duckdb",
    "httpx",
    "requests",
    "urllib.request",
    "urllib3",
    "http.client",
    "http.server",
    "socket",
    "sqlite3",
    "subprocess",
    "shutil",
    "tempfile",
    "glob",
    "fcntl",
)
FILE_IO_BUILTINS = {"open"}
FILE_IO_METHODS = {
    "open",
    "read_text",
    "write_text",
    "read_bytes",
    "write_bytes",
    "mkdir",
    "unlink",
    "rmdir",
    "touch",
    "iterdir",
    "glob",
    "rglob",
    "exists",
    "is_file",
    "is_dir",
    "stat",
    "symlink_to",
    "hardlink_to",
    "chmod",
}
OS_FILE_FUNCTIONS = {
    "open",
    "fdopen",
    "remove",
    "unlink",
    "rename",
    "replace",
    "mkdir",
    "makedirs",
    "listdir",
    "scandir",
    "walk",
    "stat",
    "lstat",
    "rmdir",
    "removedirs",
    "chmod",
    "chown",
    "link",
    "symlink",
    "truncate",
    "read",
    "write",
}
OS_PATH_FILE_FUNCTIONS = {"exists", "isfile", "isdir", "getsize", "getmtime", "getctime", "lexists", "islink"}


def _module_forbidden_in_core(module: str) -> bool:
    return _is_dagster(module) or any(
        module == name or module.startswith(name + ".") for name in CORE_FORBIDDEN_IMPORTS
    )


def impure_imports(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if _module_forbidden_in_core(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            if any(_module_forbidden_in_core(module) for module in modules):
                found.append(f"line {node.lineno}: from {node.module} import ...")
    return found


def file_io_calls(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in FILE_IO_BUILTINS:
            found.append(f"line {node.lineno}: {func.id}(")
        elif isinstance(func, ast.Attribute):
            owner = func.value
            if isinstance(owner, ast.Name) and owner.id == "os":
                if func.attr in OS_FILE_FUNCTIONS:
                    found.append(f"line {node.lineno}: os.{func.attr}(")
            elif isinstance(owner, ast.Attribute) and owner.attr == "path" and isinstance(owner.value, ast.Name):
                if owner.value.id == "os" and func.attr in OS_PATH_FILE_FUNCTIONS:
                    found.append(f"line {node.lineno}: os.path.{func.attr}(")
            elif func.attr in FILE_IO_METHODS:
                found.append(f"line {node.lineno}: .{func.attr}(")
    return found


# The import graph. A module belongs to the folder it is in (core, storage, ...) or, at the package root, to its
# own name (settings, jobs, ...). Layers, lowest first, as the code has them: a module may import from its own
# folder and from lower layers only, never up and never sideways (storage and llm know nothing of each other).
# Every import counts, also one inside a function or under TYPE_CHECKING: it is a dependency all the same.
# core/ is layered within itself by the batch's way (the README's map): a stage imports only the stages before it;
# frigate/ (payload readers) sits beside context/, evaluation/ (metrics of verdicts) after outbound/.
CORE_LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),  # core/__init__.py
    ("core.intake",),  # record validation, the fast check, batching, which batches to run
    ("core.context", "core.frigate"),  # enrichment, history, camera profiles, sections; Frigate's payloads
    ("core.visits",),  # a batch's sighting linked into a visit across cameras; the visit's facts
    ("core.prompt",),  # the static prompt and sections, tokens, budget, output schemas, rubric
    ("core.verdict",),  # call and repair, evidence floor, the stored verdict, alerts
    ("core.outbound",),  # MQTT messages, Frigate write-back, timeline
    ("core.evaluation",),  # judgment-quality metrics, the report, scenario JSON
)
LAYERS: tuple[tuple[str, ...], ...] = (
    *CORE_LAYERS,  # pure rules
    ("settings",),  # HsiSettings: hsi.env + environment, checked with core's rules
    ("steps",),  # the pipeline's steps with the settings: called by the assets, the evaluation and the config check
    ("synthetic",),  # seeded data (the config check's calibration batches come from here)
    ("storage", "llm"),  # DuckDB (every SQL statement); llama-server
    ("resources", "partitions", "instance"),  # Dagster's building blocks: resources, partitions, the run queue
    ("evaluation",),  # the evaluation engine: scenarios through production's code on the resources
    ("assets",),
    ("jobs",),
    ("sensors",),
    ("definitions",),  # the one dg.Definitions
    ("cli",),  # the `hsi` command: may use everything
    ("__init__",),  # the package itself
)


def _module_names() -> dict[str, str]:
    """Dotted module name -> its path relative to the package."""
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path.relative_to(PACKAGE).as_posix()
    return names


def _group(module: str) -> str:
    """The layer a module belongs to: its top folder, or `core.<stage>` inside core/."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "core":
        return f"core.{parts[2]}"
    return parts[1] if len(parts) > 1 else "__init__"


def _resolve(name: str, modules: dict[str, str]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def internal_imports(module: str, tree: ast.Module, modules: dict[str, str]) -> list[tuple[int, str]]:
    """(line, imported module) for every import of a package module: `from a.b import c` is a.b.c when c is a
    module, else a.b; relative imports are resolved."""
    is_package = modules[module].endswith("__init__.py")
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        for name in names:
            if name.split(".")[0] == PACKAGE.name and (target := _resolve(name, modules)) and target != module:
                found.append((node.lineno, target))
    return found


def import_graph() -> dict[str, list[tuple[int, str]]]:
    modules = _module_names()
    trees = dict(_parsed())
    return {module: internal_imports(module, trees[path], modules) for module, path in modules.items()}


def layer_violations(graph: dict[str, list[tuple[int, str]]]) -> list[str]:
    level = {group: rank for rank, layer in enumerate(LAYERS) for group in layer}
    found = []
    for module, imports in sorted(graph.items()):
        for line, target in imports:
            source_group, target_group = _group(module), _group(target)
            if source_group == target_group:
                continue
            if source_group not in level or target_group not in level:
                found.append(f"{module}:{line} -> {target}: {source_group} or {target_group} has no layer in LAYERS")
            elif level[target_group] >= level[source_group]:
                way = "sideways" if level[target_group] == level[source_group] else "up"
                found.append(f"{module}:{line} -> {target}: {source_group} imports {way} from {target_group}")
    return found


def import_cycles(graph: dict[str, list[tuple[int, str]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    edges = {module: sorted({target for _, target in imports}) for module, imports in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if child < len(edges.get(node, ())):
                work.append((node, child + 1))
                target = edges[node][child]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return cycles


def _lines(findings: list[str]) -> list[int]:
    return sorted(int(finding.split(":")[0].removeprefix("line ")) for finding in findings)


def _violations(check, allowed: tuple[str, ...]) -> dict[str, list[str]]:
    return {
        relative: found for relative, tree in _sources() if not _allowed(relative, allowed) and (found := check(tree))
    }


def test_sql_is_executed_only_in_storage() -> None:
    assert _violations(sql_calls, SQL_ALLOWED) == {}


def test_sql_is_written_only_in_storage() -> None:
    assert _violations(sql_text, SQL_ALLOWED) == {}


def test_only_cli_writes_the_environment() -> None:
    assert _violations(environ_writes, ENVIRON_ALLOWED) == {}


def test_dagster_is_imported_only_by_the_dagster_face_resources_and_cli() -> None:
    assert _violations(dagster_imports, DAGSTER_ALLOWED) == {}


def test_core_imports_no_database_http_dagster_or_file_modules() -> None:
    assert {
        relative: found
        for relative, tree in _sources()
        if relative.startswith(CORE) and (found := impure_imports(tree))
    } == {}


def test_core_reads_and_writes_no_files() -> None:
    assert {
        relative: found for relative, tree in _sources() if relative.startswith(CORE) and (found := file_io_calls(tree))
    } == {}


def test_no_module_imports_from_a_higher_layer() -> None:
    assert layer_violations(import_graph()) == []


def test_the_import_graph_has_no_cycle() -> None:
    assert import_cycles(import_graph()) == []


def test_core_is_a_handful_of_stage_folders() -> None:
    """Every core module sits in a stage folder of CORE_LAYERS, none named like its folder, and no stage holds more
    than a quarter of core's lines (a stage that outgrows that wants a cut of its own)."""
    stages = {group.removeprefix("core.") for layer in CORE_LAYERS for group in layer if group != "core"}
    core = PACKAGE / "core"
    loose = sorted(p.name for p in core.glob("*.py") if p.name != "__init__.py")
    assert loose == [], f"modules directly in core/: {loose}"
    folders = {p.name for p in core.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == stages
    named_like_folder = sorted(str(p.relative_to(PACKAGE)) for p in core.rglob("*.py") if p.stem == p.parent.name)
    assert named_like_folder == []
    lines = {stage: sum(len(p.read_text().splitlines()) for p in (core / stage).rglob("*.py")) for stage in stages}
    total = sum(lines.values())
    assert {stage: n for stage, n in lines.items() if n > total / 4} == {}, lines


# The README's map: a table under "## Map" whose first cell names one or more folders (`hsi_dagster/llm/`) and
# whose second cell names that folder's modules, without `.py` (`client` `router`). Every package folder with a
# module and every test folder has a row (other folders may have one too); every module of the package is named in
# its folder's row; every path the section names (a backticked name with a `/`, or a link) exists, from the
# repository root or from the package.
ROOT = PACKAGE.parent
README = ROOT / "README.md"
README_MAX_LINES = 400
DATED = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")


def readme_map(text: str) -> str:
    """The README's "## Map" section, up to the next second-level heading."""
    found = re.search(r"^## Map\b.*?$(.*?)(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    return found.group(1) if found else ""


def map_rows(section: str) -> dict[str, set[str]]:
    """Folder (as written, ending in `/`) -> the modules its row names."""
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        folders = re.findall(r"`([^`\s]+/)`", cells[0]) if cells else []
        if not folders or re.sub(r"`[^`]*`", "", cells[0]).strip():
            continue
        modules = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cells[1])) if len(cells) > 1 else set()
        for folder in folders:
            rows.setdefault(folder, set()).update(modules if len(folders) == 1 else set())
    return rows


def tree_rows() -> dict[str, set[str]]:
    """What the map must name: each package folder with a module -> its modules; each test folder -> nothing."""
    rows: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        folder = path.parent.relative_to(ROOT).as_posix() + "/"
        rows.setdefault(folder, set())
        if path.stem != "__init__":
            rows[folder].add(path.stem)
    tests = ROOT / "tests"
    for folder in sorted([tests, *(p for p in tests.rglob("*") if p.is_dir() and p.name != "__pycache__")]):
        rows.setdefault(folder.relative_to(ROOT).as_posix() + "/", set())
    return rows


def map_differences(named: dict[str, set[str]], tree: dict[str, set[str]]) -> list[str]:
    """What to change in the map, one line each, ready to act on."""
    changes = []
    for folder, modules in sorted(tree.items()):
        if folder not in named:
            listed = " ".join(f"`{m}`" for m in sorted(modules))
            changes.append(f"add a row: | `{folder}` | {listed} | <its job> |")
        elif folder.startswith(PACKAGE.name + "/") and (missing := modules - named[folder]):
            changes.append(f"add to the row of `{folder}`: {' '.join(f'`{m}`' for m in sorted(missing))}")
    for folder, modules in sorted(named.items()):
        if folder not in tree and folder.startswith((PACKAGE.name + "/", "tests/")) and not (ROOT / folder).is_dir():
            changes.append(f"remove the row of `{folder}` (no such folder)")
        elif folder in tree and (extra := modules - tree[folder]):
            changes.append(f"remove from the row of `{folder}`: {' '.join(f'`{m}`' for m in sorted(extra))}")
    return changes


def missing_paths(section: str) -> list[str]:
    named = re.findall(r"`([^`\s]*/[^`\s]*)`", section) + re.findall(r"\]\(([^)\s#]+)", section)
    return sorted(
        {
            name
            for name in named
            if "://" not in name
            and not name.startswith("/")  # an HTTP path such as /api/events
            and not (ROOT / name).exists()
            and not (PACKAGE / name).exists()
        }
    )


def test_the_readme_map_names_every_module_and_test_folder() -> None:
    """The README's map against the tree. A failure lists the edits to make in the "## Map" table."""
    section = readme_map(README.read_text(encoding="utf-8"))
    assert section, 'README.md has no "## Map" section'
    changes = map_differences(map_rows(section), tree_rows())
    assert changes == [], "README.md's map is behind the tree; in its table:\n" + "\n".join(changes)


def test_every_path_in_the_readme_map_exists() -> None:
    missing = missing_paths(readme_map(README.read_text(encoding="utf-8")))
    assert missing == [], f"README.md's map names paths that do not exist: {missing}"


def test_the_readme_is_a_short_guide_without_dated_measurements() -> None:
    """The README stays a user's guide: under 400 lines, every dated run in docs/measurements.md."""
    lines = README.read_text(encoding="utf-8").splitlines()
    dated = [f"line {n}: {line.strip()[:80]}" for n, line in enumerate(lines, 1) if DATED.search(line)]
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines: move reference to a docs/ page"
    assert dated == [], f"dated text in README.md (its place is docs/measurements.md): {dated}"


def broken_links(path: Path) -> list[str]:
    """The relative links of a markdown file (`[text](target)`) whose target does not exist beside it."""
    targets = re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8"))
    return [
        target
        for target in targets
        if "://" not in target
        and not target.startswith(("#", "mailto:"))
        and not (path.parent / target.split("#")[0]).exists()
    ]


def test_links_of_the_readme_and_the_docs_pages_resolve() -> None:
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    assert {page.relative_to(ROOT).as_posix(): found for page in pages if (found := broken_links(page))} == {}


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
    more = (
        "import os\nenv = os.environ\nenv['A'] = '1'\nos.environ.pop('B')\nos.environ |= {'C': '3'}\n"
        "os.unsetenv('D')\nos.environ.clear()\nos.environ.__setitem__('E', '5')\ndict(os.environ).update(F='6')\n"
    )
    assert _lines(environ_writes(ast.parse(more))) == [3, 4, 5, 6, 7, 8]
    sql = (
        '"""Docstring: SELECT what FROM where is prose."""\nq = "SELECT a FROM t"\nf"INSERT INTO {table} VALUES (?)"\n'
        '"select the model from the list"\n"CREATE OR REPLACE TEMP TABLE x AS"\nconn.query("x")\n'
    )
    assert _lines(sql_text(ast.parse(sql))) == [2, 3, 5]
    assert sql_calls(ast.parse(sql)) == ["line 6: .query("]
    impure = "import duckdb\nfrom httpx import Client\nfrom urllib import request\nimport json\nimport dagster as dg\n"
    assert _lines(impure_imports(ast.parse(impure))) == [1, 2, 3, 5]
    io = "open(p)\np.read_text()\nos.replace(a, b)\nos.path.exists(p)\nPath(p).write_bytes(b)\ntext.replace('a', 'b')\n"
    assert _lines(file_io_calls(ast.parse(io))) == [1, 2, 3, 4, 5]
    modules = {"hsi_dagster.core.intake.a": "core/intake/a.py", "hsi_dagster.storage": "storage/__init__.py"}
    modules |= {"hsi_dagster.storage.b": "storage/b.py", "hsi_dagster.llm.c": "llm/c.py"}
    imports = "from hsi_dagster.storage import b\nfrom ...storage.b import X\nimport hsi_dagster.llm.c.Y\nimport json\n"
    assert internal_imports("hsi_dagster.core.intake.a", ast.parse(imports), modules) == [
        (1, "hsi_dagster.storage.b"),
        (2, "hsi_dagster.storage.b"),
        (3, "hsi_dagster.llm.c"),
    ]
    graph = {
        "hsi_dagster.core.intake.a": [(1, "hsi_dagster.storage.b"), (5, "hsi_dagster.core.verdict.e")],
        "hsi_dagster.storage.b": [(2, "hsi_dagster.core.intake.a")],
        "hsi_dagster.llm.c": [(3, "hsi_dagster.storage.b")],
        "hsi_dagster.cli.d": [(4, "hsi_dagster.llm.c")],
    }
    assert layer_violations(graph) == [
        "hsi_dagster.core.intake.a:1 -> hsi_dagster.storage.b: core.intake imports up from storage",
        "hsi_dagster.core.intake.a:5 -> hsi_dagster.core.verdict.e: core.intake imports up from core.verdict",
        "hsi_dagster.llm.c:3 -> hsi_dagster.storage.b: llm imports sideways from storage",
    ]
    assert import_cycles(graph) == [["hsi_dagster.core.intake.a", "hsi_dagster.storage.b"]]
    assert dagster_imports(ast.parse("import dagster as dg\nfrom dagster_duckdb import X\nimport dagsterish")) == [
        "line 1: import dagster",
        "line 2: from dagster_duckdb import ...",
    ]
    section = (
        "\n| folder | modules | job |\n|---|---|---|\n| `hsi_dagster/llm/` | `client` `gone` | the client |\n"
        "| `tests/a/` `tests/b/` | | two test folders |\n| promise | `wc -l hsi_dagster/no/such.py` |\n"
        "See `docs/nowhere.md` and [x](docs/contract.md).\n"
    )
    named = map_rows(section)
    assert named == {"hsi_dagster/llm/": {"client", "gone"}, "tests/a/": set(), "tests/b/": set()}
    tree = {"hsi_dagster/llm/": {"client", "router"}, "hsi_dagster/new/": {"x"}, "tests/a/": set(), "tests/c/": set()}
    assert map_differences(named, tree) == [
        "add to the row of `hsi_dagster/llm/`: `router`",
        "add a row: | `hsi_dagster/new/` | `x` | <its job> |",
        "add a row: | `tests/c/` |  | <its job> |",
        "remove from the row of `hsi_dagster/llm/`: `gone`",
        "remove the row of `tests/b/` (no such folder)",
    ]
    assert missing_paths(section) == ["docs/nowhere.md", "tests/a/", "tests/b/"]
    assert readme_map("# t\n## Map\nthe map\n## Next\nnot it\n") == "\nthe map\n"
