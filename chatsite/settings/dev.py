"""Local development: `make run`."""

from chatsite.settings.base import *  # noqa: F403
from chatsite.settings.base import env

DEBUG = env.bool("DJANGO_DEBUG", default=True)
