"""Template helpers of the site's look: icons from the vendored Lucide sprite and
numbers that static/site.js formats for the reader's locale."""

from __future__ import annotations

from django import template
from django.templatetags.static import static
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


@register.simple_tag
def icon(name: str) -> SafeString:
    """An SVG icon of static/vendor/lucide-sprite.svg (scripts/icon-sprite.mjs lists the
    names), hidden from assistive technology: the button or link around it carries the
    accessible name."""
    return format_html(
        '<svg class="icon" aria-hidden="true" focusable="false"><use href="{}#{}"></use></svg>',
        static("vendor/lucide-sprite.svg"),
        name,
    )


@register.filter
def num(value: object) -> SafeString:
    """An integer as ``<data class="num" value="N">N</data>``: site.js rewrites the text
    with Intl.NumberFormat in the reader's locale ("1,998,589"); without JS the digits
    stay. Anything else (None, "") renders as it is."""
    if isinstance(value, bool) or not isinstance(value, int):
        return format_html("{}", "" if value is None else value)
    return format_html('<data class="num" value="{}">{}</data>', value, value)
