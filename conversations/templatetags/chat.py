"""Template filters of the chat pages."""

from django import template
from django.utils.safestring import SafeString, mark_safe

from conversations.rendering import markdown_to_html

register = template.Library()


@register.filter
def markdown(text: str) -> SafeString:
    """Render assistant Markdown as sanitised HTML (see conversations.rendering)."""
    return mark_safe(markdown_to_html(text))  # noqa: S308 - sanitised by nh3
