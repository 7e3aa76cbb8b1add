"""Celery tasks of the chat (thin: each calls one service)."""

from celery import shared_task

from conversations import services


@shared_task(name="conversations.tasks.reap_streaming_messages")
def reap_streaming_messages(older_than_s: float = 5.0) -> int:
    """Finalise answers left streaming with no relay (web process died, tab closed)."""
    return services.streaming_messages_reap(older_than_s=older_than_s)
