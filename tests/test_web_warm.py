"""The web process loads at start what a turn needs (chatsite.asgi.web_warm), so the
first turn of a fresh process is not slower than a warm one (issue 13)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.stack import ROOT

PROBE = """
import json
import chatsite.asgi
from django.urls import get_resolver
from inference.tokens import prompt_counter
from safety.classifiers.embedded import embedded_model
print(json.dumps({
    "reverse_built": bool(get_resolver()._populated),
    "tokenizer": prompt_counter.cache_info().currsize,
    "classifier": embedded_model.cache_info().currsize,
}))
"""


def _warmed(**env: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "chatsite.settings.test", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_asgi_app_loads_the_tokenizer_urls_and_classifier():
    """What daphne imports has, before any request, the tokenizer, the URLconf's
    reverse tables and (moderation on) the input classifier loaded."""
    warmed = _warmed(SAFETY_INPUT_ENABLED="1", MEMORY_TOKENIZER_ENGINE="scripted")
    assert warmed == {"reverse_built": True, "tokenizer": 1, "classifier": 1}


def test_with_moderation_off_the_classifier_is_not_loaded():
    warmed = _warmed(SAFETY_INPUT_ENABLED="0", MEMORY_TOKENIZER_ENGINE="scripted")
    assert warmed["classifier"] == 0 and warmed["reverse_built"]
