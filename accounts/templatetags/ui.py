"""Template helpers of the site's look: icons from the vendored Lucide sprite, numbers
that static/site.js formats for the reader's locale, and models' friendly names."""

from __future__ import annotations

import re

from django import template
from django.conf import settings
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


# A quantisation or file suffix of a model id: ".Q4_1", "-Q4_K_M", ".gguf", "-GGUF",
# "-AWQ", "-fp16" (llama.cpp and Hugging Face naming).
_MODEL_SUFFIX = re.compile(
    r"([.-](gguf|ggml|bin|safetensors|awq|gptq|fp16|bf16|f16|f32|int4|int8|"
    r"q\d+(_[a-z0-9]+)*|iq\d+(_[a-z0-9]+)*))+$",
    re.IGNORECASE,
)


@register.filter
def model_label(model_id: object) -> str:
    """The name the pages show for a model id (``ModelPool.model``): its entry in
    ``settings.CHAT_MODEL_DISPLAY_NAMES``, else the id prettified: an organisation
    prefix ("HuggingFaceTB/") and a quantisation or file suffix (".Q4_1", ".gguf") are
    dropped and hyphens and underscores become spaces, so "SmolLM2-135M-Instruct.Q4_1"
    reads "SmolLM2 135M Instruct". "" and None give ""."""
    text = "" if model_id is None else str(model_id).strip()
    if not text:
        return ""
    names: dict[str, str] = getattr(settings, "CHAT_MODEL_DISPLAY_NAMES", {}) or {}
    if text in names:
        return str(names[text])
    short = text.rsplit("/", 1)[-1]
    short = _MODEL_SUFFIX.sub("", short) or short
    return re.sub(r"[-_\s]+", " ", short).strip() or text
