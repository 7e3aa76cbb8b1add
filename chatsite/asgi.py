"""ASGI entry point: Channels' ProtocolTypeRouter in front of Django's ASGI handler.

Run with `daphne chatsite.asgi:application`. HTTP (pages, SSE streams, the API) goes to
Django; the router is where WebSocket consumers would be added. With DEBUG on (`make
run`), static files are served by Django's ASGIStaticFilesHandler; in production a
reverse proxy serves STATIC_ROOT.
"""

import os

from channels.routing import ProtocolTypeRouter
from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings.dev")

django_asgi_app = get_asgi_application()
http_app = (
    ASGIStaticFilesHandler(django_asgi_app) if settings.DEBUG else django_asgi_app
)

application = ProtocolTypeRouter({"http": http_app})
