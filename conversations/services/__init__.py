"""Writes of the chat (CONVENTIONS §1): turns, answers, conversation edits.

- :mod:`.turns`: send a message, regenerate, continue an answer, stop (the start of a generation);
- :mod:`.answers`: the answer's side of settling a generation, and the reaper;
- :mod:`.conversations`: rename, delete, titles, rolling summaries;
- :mod:`.feedback`: thumbs up/down on answers;
- :mod:`.imports`: import conversations from our JSON export or ChatGPT's;
- :mod:`.threads`: edit a message (a new branch), switch versions and branches.
- :mod:`.scope`: which documents a conversation's answers may quote;
- :mod:`.tool_steps`: an answer's tool calls and their results, in the tree.
"""

from conversations.services.answers import (
    RECORDER,
    MessageRecorder,
    message_finalize,
    message_generation,
    streaming_messages_reap,
)
from conversations.services.conversations import (
    conversation_delete,
    conversation_rename,
    conversation_summarize,
    conversation_title_generate,
)
from conversations.services.feedback import feedback_delete, feedback_set
from conversations.services.imports import conversations_import
from conversations.services.scope import conversation_scope_set
from conversations.services.text import title_from_text
from conversations.services.threads import thread_switch, turn_edit
from conversations.services.tool_steps import (
    tool_calls_store,
    tool_result_append,
    tool_step_append,
)
from conversations.services.turns import (
    BUSY_MESSAGE,
    Turn,
    turn_continue,
    turn_regenerate,
    turn_start,
    turn_stop,
)
from conversations.services.turns.tools import tool_step_run

__all__ = [
    "BUSY_MESSAGE",
    "RECORDER",
    "MessageRecorder",
    "Turn",
    "conversation_delete",
    "conversation_rename",
    "conversation_scope_set",
    "conversation_summarize",
    "conversation_title_generate",
    "conversations_import",
    "feedback_delete",
    "feedback_set",
    "message_finalize",
    "message_generation",
    "streaming_messages_reap",
    "thread_switch",
    "title_from_text",
    "tool_calls_store",
    "tool_result_append",
    "tool_step_run",
    "tool_step_append",
    "turn_edit",
    "turn_continue",
    "turn_regenerate",
    "turn_start",
    "turn_stop",
]
