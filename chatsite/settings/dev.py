"""Local development: `make run`.

DEBUG is off, as in production: an unknown address or an error shows the site's own
page, never Django's debug page (which lists every URL pattern and the settings). A
developer turns it on for a session with ``DJANGO_DEBUG=1 make run``. Static files are
served by the web process either way (SERVE_STATIC; chatsite/asgi.py).
"""

from chatsite.settings.base import *  # noqa: F403
from chatsite.settings.base import env

DEBUG = env.bool("DJANGO_DEBUG", default=False)
SERVE_STATIC = env.bool("DJANGO_SERVE_STATIC", default=True)

# The embedded SmolLM2-135M makes no tool call under tool_choice "auto" (0 of 9,
# bench/results/2026-12-04-tool-models.md) while the four tools' definitions add 516
# prompt tokens to every new chat (first token 0.1 s without them, 2.8-11 s with them
# on 2 busy cores): tools are offered when the user picks one for a message.
CHAT_TOOLS_AUTO = env.bool("CHAT_TOOLS_AUTO", default=False)
