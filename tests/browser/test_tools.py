"""A Python tool turn in the browser (the tool loop, conversations/services/turns/
tools.py, and its page side in static/chat.js): the model's call runs in the real
sandbox (bubblewrap; skipped without it), its block streams into the answer, the final
answer follows in the same article, and after a reload the thread looks the same."""

from __future__ import annotations

import json
import shutil

import pytest
from playwright.sync_api import expect

from conversations.models import Message
from tests.browser.conftest import BROWSER_MARKS, last_answer
from tests.browser.pages import axe_violations

CODE = "print(6 * 7)"
CALLS = json.dumps(
    [{"name": "run_python", "arguments": json.dumps({"code": CODE}), "id": "call_py"}]
)

pytestmark = [
    *BROWSER_MARKS,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing"),
]


@pytest.mark.parametrize(
    "worker_args", [["--script-tool-calls", CALLS, "--no-cycle", "--delay-ms", "10"]]
)
@pytest.mark.parametrize(
    "site_env",
    [
        {
            "CHAT_TOOL_MAX_STEPS": "1",  # one round, then the model answers
            "CHAT_TOOLS_PROVIDER": "conversations.services.turns.registry.registry_tools",
        }
    ],
)
def test_a_python_tool_turn_streams_its_step_and_answer_and_survives_a_reload(page):
    page.fill("#content", "What is 6 * 7? Use Python.")
    page.keyboard.press("Enter")
    page.wait_for_selector("article.msg-assistant.status-complete")
    answer = last_answer(page)
    block = answer.locator("details.tool-step")
    assert block.count() == 1
    assert "Python" in block.locator("summary").inner_text()
    block.locator("summary").click()
    assert "42" in block.inner_text()
    final = Message.objects.filter(role="assistant").order_by("created_at").last()
    assert final.finish_reason == "stop"
    assert answer.get_attribute("data-message-id") == str(final.id)
    shown = answer.locator(".msg-body").inner_text().strip()
    assert shown
    page.reload()
    page.wait_for_selector("article.msg-assistant.status-complete")
    again = last_answer(page)
    assert again.locator("details.tool-step").count() == 1
    again.locator("details.tool-step summary").click()
    assert "42" in again.locator("details.tool-step").inner_text()
    assert again.locator(".msg-body").inner_text().strip() == shown


@pytest.mark.parametrize(
    "worker_args", [["--script-tool-calls", CALLS, "--no-cycle", "--delay-ms", "10"]]
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
def test_run_python_picked_in_the_tools_menu_for_one_message(page, user):
    """The composer's Tools menu (templates/chat/_tool_picker.html, static/
    tool-picker.js): picked by keyboard for one message, the pick goes with the post
    and the menu returns to Auto; an on/off choice is saved and survives a reload."""
    from tools.models import ToolPreference

    summary = page.locator("#tool-picker summary")
    assert summary.inner_text().startswith("Tools: Auto")
    summary.focus()
    page.keyboard.press("Enter")  # opens the menu
    once = page.get_by_role("group", name="Use for this message")
    once.get_by_role("radio", name="Run Python").check()
    assert "Run Python" in summary.inner_text()
    page.keyboard.press("Escape")
    assert page.locator("#tool-picker").get_attribute("open") is None
    page.fill("#content", "What is 6 * 7? Use Python.")
    with page.expect_request(
        lambda r: r.method == "POST" and "/messages/" in r.url
    ) as sent:
        page.keyboard.press("Enter")
    assert 'name="tool"\r\n\r\nrun_python' in (sent.value.post_data or "")
    page.wait_for_selector("article.msg-assistant.status-complete")
    answer = last_answer(page)
    block = answer.locator("details.tool-step")
    assert block.count() == 1 and "Python" in block.locator("summary").inner_text()
    block.locator("summary").click()
    assert "42" in block.inner_text()
    shown = answer.locator(".msg-body").inner_text().strip()
    assert shown
    assert summary.inner_text().startswith("Tools: Auto")  # for one message only
    # turned off for later turns: saved at once, and it can no longer be picked
    summary.click()
    allowed = page.get_by_role("group", name="The assistant may use")
    allowed.get_by_role("checkbox", name="Run Python").uncheck()
    expect(page.locator(".tool-picker-status")).to_have_text("Off: Run Python.")
    assert ToolPreference.objects.get(user=user).disabled == ["run_python"]
    page.reload()
    page.wait_for_selector("article.msg-assistant.status-complete")
    again = last_answer(page)
    assert again.locator("details.tool-step").count() == 1
    again.locator("details.tool-step summary").click()
    assert "42" in again.locator("details.tool-step").inner_text()
    assert again.locator(".msg-body").inner_text().strip() == shown
    page.locator("#tool-picker summary").click()
    box = page.get_by_role("group", name="The assistant may use")
    assert not box.get_by_role("checkbox", name="Run Python").is_checked()
    once = page.get_by_role("group", name="Use for this message")
    assert once.get_by_role("radio", name="Run Python").is_disabled()


@pytest.mark.parametrize(
    "site_env",
    [{"CHAT_TOOLS_PROVIDER": "conversations.services.turns.registry.registry_tools"}],
)
def test_the_tools_menu_fits_a_phone(page):
    """With the Tools menu beside Documents, the chat still fits a 360 px screen, the
    opened menu stays on it, and axe-core finds nothing serious in it."""
    phone = {"width": 360, "height": 740}
    page.set_viewport_size(phone)
    page.reload()
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= phone["width"]
    page.locator("#tool-picker summary").click()
    panel = page.locator(".tool-picker-panel").bounding_box()
    assert panel is not None
    assert panel["x"] >= 0 and panel["x"] + panel["width"] <= phone["width"]
    assert panel["y"] >= 0
    # an icon button and options a finger can hit: 44 px or more
    for box in [
        page.locator("#tool-picker summary").bounding_box(),
        page.locator("#doc-scope summary").bounding_box(),
        *[o.bounding_box() for o in page.locator(".tool-picker-panel label").all()],
    ]:
        assert box is not None and box["height"] >= 44 and box["width"] >= 44
    assert "▾" not in page.locator(".composer-tools").inner_text()
    # axe-core: the opened menu has no serious or critical violation
    blocking = [
        v for v in axe_violations(page) if v.get("impact") in {"serious", "critical"}
    ]
    assert blocking == []
