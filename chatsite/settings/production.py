"""Production: secrets come from the environment and have no defaults."""

from chatsite.settings.base import *  # noqa: F403
from chatsite.settings.base import DATABASE_POOL_MAX_SIZE, database_pool, env

DEBUG = False
SECRET_KEY = env("DJANGO_SECRET_KEY")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS")
DATABASES = {"default": database_pool(env.db("DATABASE_URL"), DATABASE_POOL_MAX_SIZE)}
REDIS_URL = env("REDIS_URL")
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
