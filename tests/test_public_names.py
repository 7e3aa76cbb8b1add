"""What one module of an app uses from another has a public name: no app module
imports, or reaches through a module for, a name with a leading underscore."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.stack import ROOT

# Every top-level package of ours, and the apps whose code is checked.
OURS = {"chatsite", "conversations", "gateway", "memory", "safety", "inference"}
OURS |= {"accounts", "evaluation", "tools"}
APPS = sorted(name for name in OURS if (ROOT / name).is_dir())


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(path: Path) -> list[str]:
    """Return ``file:line: name`` for each private name of another of our modules
    that ``path`` imports (``from x import _y``) or reads (``x._y`` after
    ``import x`` / ``from p import x``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] not in OURS:
                continue
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{path}:{node.lineno}: {node.module}.{alias.name}")
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in OURS:
                    modules.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr != "_meta"  # Django's model options: public by contract
            and node.attr != "_default_manager"
        ):
            found.append(f"{path}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_app_module_uses_a_private_name_of_another_module():
    offenders = [
        hit
        for app in APPS
        for path in sorted((ROOT / app).rglob("*.py"))
        if "migrations" not in path.parts
        for hit in private_uses(path)
    ]
    assert offenders == []


def test_the_scan_finds_a_private_import_and_a_private_attribute(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from gateway.quota import _lua\n"
        "from conversations.services import turns\n"
        "turns._helper()\n"
        "from gateway.models import Plan\n"
        "Plan._meta\n"
    )
    assert [hit.split(": ", 1)[1] for hit in private_uses(source)] == [
        "gateway.quota._lua",
        "turns._helper",
    ]
