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
