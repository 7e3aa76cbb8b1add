"""Celery tasks of the chat (thin: each calls one service)."""

from celery import shared_task

from conversations import services


@shared_task(name="conversations.tasks.reap_streaming_messages")
def reap_streaming_messages(older_than_s: float = 5.0) -> int:
    """Finalise answers left streaming with no relay (web process died, tab closed)."""
    return services.streaming_messages_reap(older_than_s=older_than_s)


@shared_task(name="conversations.tasks.title_conversation")
def title_conversation(conversation_id: str) -> str | None:
    """Title a conversation after its first exchange (model, else the first message)."""
    return services.conversation_title_generate(conversation_id=conversation_id)


@shared_task(name="conversations.tasks.summarize_conversation")
def summarize_conversation(conversation_id: str) -> bool:
    """Roll the conversation's summary forward if its unsummarised history is long."""
    return services.conversation_summarize(conversation_id=conversation_id)


@shared_task(name="conversations.tasks.tool_step")
def tool_step(message_id: str) -> str:
    """Run the tool calls of a settled answer and start the turn's next step."""
    return services.tool_step_run(message_id=message_id)
