"""The conversations app's Redis keys (owner :mod:`conversations`). Part of
:mod:`inference.keys`.

``chat:toolbusy:{c:<conversation>}``, ``chat:toolstep:{m:<message>}`` (and its ``:run``
lock), ``chat:toolparams:{m:<message>}``, ``chat:toolstop:{m:<message>}``: a tool
step's state, CHAT_TOOL_STEP_TTL_S.
"""

from __future__ import annotations

from typing import Any


def tool_busy_key(conversation_id: Any) -> str:
    """Return the mark of a conversation whose tool step runs (value: message id)."""
    return f"chat:toolbusy:{{c:{conversation_id}}}"


def tool_step_key(message_id: Any) -> str:
    """Return the state of a message's tool step (JSON)."""
    return f"chat:toolstep:{{m:{message_id}}}"


def tool_step_run_key(message_id: Any) -> str:
    """Return the once-only lock of a message's tool step run (SET NX)."""
    return f"{tool_step_key(message_id)}:run"


def tool_params_key(message_id: Any) -> str:
    """Return the sampling parameters a message's tool loop continues with (JSON)."""
    return f"chat:toolparams:{{m:{message_id}}}"


def tool_stop_key(message_id: Any) -> str:
    """Return the stop flag of a message's tool step."""
    return f"chat:toolstop:{{m:{message_id}}}"
