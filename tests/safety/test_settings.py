"""The product defaults of moderation (chatsite/settings/safety.py): input and output
moderation are on in `make run` and production, though the test settings keep both
off unless a test asks."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys

import pytest

from tests.stack import ROOT


def _product_settings(monkeypatch: pytest.MonkeyPatch) -> dict:
    """The safety settings a process gets with no SAFETY_* variable set."""
    for name in list(os.environ):
        if name.startswith("SAFETY_"):
            monkeypatch.delenv(name)
    safety = importlib.import_module("chatsite.settings.safety")
    try:
        return vars(importlib.reload(safety)).copy()
    finally:
        monkeypatch.undo()
        importlib.reload(safety)  # back to what the process's environment says


def test_input_moderation_is_on_by_default_in_the_product(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _product_settings(monkeypatch)["SAFETY_INPUT_ENABLED"] is True


def test_output_moderation_is_on_in_hold_mode_by_default_in_the_product(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    product = _product_settings(monkeypatch)
    assert (product["SAFETY_OUTPUT_ENABLED"], product["SAFETY_OUTPUT_MODE"]) == (
        True,
        "hold",
    )
    assert product["SAFETY_OUTPUT_CONFIRM"] is True


# What the web process (uvicorn) imports in `make run` (Procfile `web`): the settings module is the one
# chatsite/asgi.py defaults to, and every answer gets the configured stream policies.
FRESH_WEB_PROBE = """
import json
import chatsite.asgi
from django.conf import settings
from gateway.generations.policy import policies_for

chain = policies_for(job_id="probe", user_id=1)
print(json.dumps({
    "settings": settings.SETTINGS_MODULE,
    "policies": [type(p).__name__ for p in (chain.policies if chain else [])],
    "hold": [p.moderator.hold for p in (chain.policies if chain else [])],
}))
"""


def test_a_fresh_make_run_moderates_every_answer_in_hold_mode() -> None:
    """`make run` starts the Procfile with no settings module and no SAFETY_* variable
    (the Makefile exports neither): its web process, started the same way, runs output
    moderation in hold mode on every generation."""
    makefile = (ROOT / "Makefile").read_text()
    procfile = (ROOT / "Procfile").read_text()
    for text in (makefile, procfile):
        assert not re.search(r"SAFETY_OUTPUT|DJANGO_SETTINGS_MODULE", text)
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("SAFETY_")
        and name not in ("DJANGO_SETTINGS_MODULE", "CHATSITE_SERVICES")
    }
    # nothing here touches the database, Redis or the GGUF: no warm-up of services,
    # the tokenizer that needs no model file
    env.update(WEB_WARM_SERVICES="0", MEMORY_TOKENIZER_ENGINE="scripted")
    out = subprocess.run(
        [sys.executable, "-c", FRESH_WEB_PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    assert probe == {
        "settings": "chatsite.settings.dev",
        "policies": ["OutputModeration"],
        "hold": [True],
    }
