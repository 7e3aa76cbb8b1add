"""The README's screenshot of a tool turn (`make screenshots`): Run Python picked in the
composer's Tools menu, the model's call run in the sandbox, its step block opened
above the answer. Written to docs/screenshots/tool-turn.png when SCREENSHOTS_DIR says
so (the make target), else to .var/screenshots/.

Skipped where Chromium or bubblewrap is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.browser.conftest import BROWSER_MARKS, SHOTS, last_answer

pytestmark = [
    *BROWSER_MARKS,
    pytest.mark.screenshots,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing"),
]
DESKTOP = {"width": 1280, "height": 800}
CODE = "primes = [n for n in range(2, 60) if all(n % d for d in range(2, n))]\nprint(primes)"
CALLS = json.dumps(
    [{"name": "run_python", "arguments": json.dumps({"code": CODE}), "id": "call_py"}]
)
ANSWER = (
    "The primes below 60 are 2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, "
    "53 and 59: **17 primes**, computed in Python above."
)


@pytest.mark.parametrize("script_text", [ANSWER])
@pytest.mark.parametrize(
    "worker_args",
    [
        ["--script-tool-calls", CALLS, "--no-cycle", "--delay-ms", "10"]
        + ["--script-call-text", "I will count them in Python."]
    ],
)
@pytest.mark.parametrize(
    "site_env",
    [
        {
            "CHAT_TOOL_MAX_STEPS": "1",
            "CHAT_TOOLS_PROVIDER": "conversations.services.turns.registry.registry_tools",
        }
    ],
)
def test_screenshot_of_a_tool_turn(page):
    page.set_viewport_size(DESKTOP)
    page.locator("#tool-picker summary").click()
    once = page.get_by_role("group", name="Use for this message")
    once.get_by_role("radio", name="Run Python").check()
    page.keyboard.press("Escape")
    page.fill("#content", "Which numbers below 60 are prime? Use Python.")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    answer = last_answer(page)
    answer.locator("details.tool-step summary").click()
    assert "59" in answer.locator("details.tool-step").inner_text()
    out = Path(os.environ.get("SCREENSHOTS_DIR") or SHOTS)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "tool-turn.png"
    page.screenshot(path=str(path))
    assert path.stat().st_size > 5_000  # an image, not an empty file
