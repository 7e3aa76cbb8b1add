"""The import contract covers every package of the project.

import-linter checks only the modules a layer names. chatsite is split over two layers
by module name (its wiring on top, the rest at the bottom), so a new chatsite module
that no layer names would go unchecked; every app package must be a layer too.
"""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _contracts() -> list[dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return config["tool"]["importlinter"]["contracts"]


def _layer_names() -> set[str]:
    (layers,) = [c for c in _contracts() if c["type"] == "layers"]
    names: set[str] = set()
    for layer in layers["layers"]:
        for part in layer.replace("|", ":").split(":"):
            names.add(part.strip())
    return names


def _app_packages() -> set[str]:
    """Top-level packages with an apps.py (the Django apps of the project)."""
    return {p.parent.name for p in ROOT.glob("*/apps.py")}


def test_every_chatsite_module_is_in_a_layer():
    names = _layer_names()
    modules = {
        f"chatsite.{p.stem}"
        for p in (ROOT / "chatsite").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__")
        or (p.is_dir() and (p / "__init__.py").exists())
    }
    assert modules, "no chatsite module found"
    assert modules - names == set(), "add these chatsite modules to a layer"


def test_every_app_is_a_layer_and_no_setting_imports_one():
    apps = _app_packages()
    assert {"conversations", "gateway", "inference", "accounts", "evaluation"} <= apps
    assert apps - _layer_names() == set()
    (forbidden,) = [c for c in _contracts() if c["type"] == "forbidden"]
    assert forbidden["source_modules"] == ["chatsite.settings"]
    assert apps - set(forbidden["forbidden_modules"]) == set()
