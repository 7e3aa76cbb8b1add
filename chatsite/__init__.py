"""Project package: settings, URL configuration, ASGI entry point and the Celery app."""

from chatsite.celery import app as celery_app

__all__ = ["celery_app"]
