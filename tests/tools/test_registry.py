"""tools/registry.py and tools/builtin.py: arguments are validated before a run, every
run has a wall clock and an output cap, a cancelled run kills its sandbox, and the
engine is offered OpenAI's tools list."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.tools.test_fetch import site  # noqa: F401 - the loopback site fixture
from tools.builtin import FETCH_URL, RUN_PYTHON
from tools.registry import (
    Tool,
    ToolContext,
    ToolResult,
    openai_tools,
    registered_tools,
    tool_run,
)

CONTEXT = ToolContext(user_id=1)
HAS_BWRAP = shutil.which("bwrap") is not None or Path("/usr/bin/bwrap").exists()


def echo_tool(**changes: Any) -> Tool:
    """A tool that returns its ``text`` argument, or sleeps ``sleep`` seconds."""

    async def run(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        if arguments.get("fail"):
            raise RuntimeError("it broke")
        await asyncio.sleep(arguments.get("sleep", 0))
        return ToolResult(text=arguments["text"], detail={"n": 1})

    fields: dict[str, Any] = {
        "name": "echo",
        "description": "Echo.",
        "parameters": {
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "sleep": {"type": "number"},
                "fail": {"type": "boolean"},
            },
            "required": ["text"],
            "additionalProperties": False,
        },
        "label": lambda a, r: "Echoed",
        "run": run,
        "wall_s": lambda: 5.0,
    }
    fields.update(changes)
    return Tool(**fields)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ("{}", "'text' is a required property"),
        ('{"text": 3}', "text: 3 is not of type 'string'"),
        ('{"text": "a", "other": 1}', "Additional properties"),
    ],
)
async def test_arguments_that_do_not_fit_the_schema_are_an_error_result(
    arguments, says
):
    ran = []

    async def run(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        ran.append(arguments)
        return ToolResult(text="ran")

    result = await tool_run(echo_tool(run=run), arguments=arguments, context=CONTEXT)
    assert result.error
    assert says in result.text
    assert ran == []


async def test_empty_arguments_are_an_empty_object():
    tool = echo_tool(parameters={"type": "object", "properties": {}})

    async def run(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult(text=repr(arguments))

    result = await tool_run(
        echo_tool(parameters=tool.parameters, run=run), arguments="", context=CONTEXT
    )
    assert (result.text, result.error) == ("{}", False)


async def test_a_run_past_its_wall_clock_is_stopped_with_an_error_result():
    tool = echo_tool(wall_s=lambda: 0.2)
    result = await tool_run(tool, arguments={"text": "x", "sleep": 30}, context=CONTEXT)
    assert result.error
    assert "did not finish within 0.2 s" in result.text


async def test_a_tool_that_raises_gives_an_error_result():
    result = await tool_run(
        echo_tool(), arguments={"text": "x", "fail": True}, context=CONTEXT
    )
    assert result.error
    assert "it broke" in result.text


async def test_the_text_for_the_model_is_cut_at_the_cap_with_a_note(settings):
    settings.TOOLS_OUTPUT_CHARS = 100
    result = await tool_run(echo_tool(), arguments={"text": "y" * 250}, context=CONTEXT)
    assert result.truncated
    assert result.text.startswith("y" * 100 + "\n[output truncated: 150 more")
    assert result.detail == {"n": 1}


def test_the_engine_is_offered_openai_function_tools():
    assert openai_tools([RUN_PYTHON]) == [
        {
            "type": "function",
            "function": {
                "name": "run_python",
                "description": RUN_PYTHON.description,
                "parameters": RUN_PYTHON.parameters,
            },
        }
    ]
    names = {t.name for t in registered_tools()}
    assert {"run_python", "fetch_url", "web_search", "search_documents"} <= names


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")
async def test_run_python_returns_what_the_program_printed():
    result = await tool_run(
        RUN_PYTHON, arguments={"code": "print(6 * 7)"}, context=CONTEXT
    )
    assert not result.error, result.text
    assert "42" in result.text
    assert result.detail["exit_code"] == 0
    assert RUN_PYTHON.label({}, result) == "Ran Python"


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")
async def test_cancelling_a_run_kills_its_sandbox(monkeypatch):
    from tools import builtin

    pids: list[int] = []
    real = builtin.python_run

    def spy(code: str, **kw: Any) -> Any:
        started = kw.pop("started")
        return real(code, started=lambda pid: (pids.append(pid), started(pid)), **kw)

    monkeypatch.setattr(builtin, "python_run", spy)
    code = "import time\nwhile True: time.sleep(0.05)\n"
    task = asyncio.ensure_future(
        tool_run(RUN_PYTHON, arguments={"code": code}, context=CONTEXT)
    )
    for _ in range(500):
        if pids:
            break
        await asyncio.sleep(0.01)
    assert pids, "the sandbox never started"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert group_members(pids[0]) == []


def group_members(pgid: int) -> list[str]:
    """Return the live (not zombie) processes of the process group ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(f"{entry.name} {fields[0]}")
    return found


async def test_fetch_url_reads_a_loopback_page_through_the_allow_list(site, settings):  # noqa: F811
    url = f"{site.base}/page.html"
    refused = await tool_run(FETCH_URL, arguments={"url": url}, context=CONTEXT)
    assert refused.error
    assert "refused" in refused.text
    settings.TOOLS_FETCH_ALLOW = ["127.0.0.1/32"]
    result = await tool_run(FETCH_URL, arguments={"url": url}, context=CONTEXT)
    assert not result.error, result.text
    assert "Heading" in result.text
    assert "in a script" not in result.text
    assert result.detail["status"] == 200
    assert FETCH_URL.label({"url": url}, result) == f"Read {url}"


async def test_a_tool_whose_schema_is_invalid_gives_an_error_result():
    tool = echo_tool(parameters={"type": "object", "properties": {"a": {"type": 5}}})
    result = await tool_run(tool, arguments={"a": 1}, context=CONTEXT)
    assert result.error
    assert "its parameter schema is invalid" in result.text
