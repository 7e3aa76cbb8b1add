"""WSGI entry point (admin-only deployments; streaming needs the ASGI app)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings.dev")

application = get_wsgi_application()
