"""Celery application (CONVENTIONS §7: `CELERY` settings namespace, autodiscovery)."""

import os

from celery import Celery

from chatsite import kombu_cluster

kombu_cluster.register()  # a redis+cluster:// REDIS_URL's broker (rediscluster://)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings.dev")

app = Celery("chatsite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
