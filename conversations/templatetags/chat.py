"""Template filters of the chat pages."""

from typing import Any

from django import template
from django.utils.safestring import SafeString, mark_safe

from conversations.rendering import answer_to_html, markdown_to_html

register = template.Library()


@register.filter
def markdown(text: str) -> SafeString:
    """Render assistant Markdown as sanitised HTML (see conversations.rendering)."""
    return mark_safe(markdown_to_html(text))  # noqa: S308 - sanitised by nh3


@register.filter
def answer_markdown(message: Any) -> SafeString:
    """Render an answer's Markdown as sanitised HTML with its ``[n]`` markers linked
    to its citations (conversations.rendering.answer_to_html)."""
    numbers = [c.number for c in message.citations.all()]
    html = answer_to_html(
        message.content, message_id=str(message.id), citations=numbers
    )
    return mark_safe(html)  # noqa: S308 - sanitised by nh3, links built from numbers
