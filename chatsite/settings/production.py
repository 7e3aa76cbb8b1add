"""Production: secrets come from the environment and have no defaults.

``manage.py check --deploy`` is clean with these settings (tests/test_security.py runs
it). HTTPS is enforced by Django (redirect, HSTS, secure cookies); behind a reverse
proxy that terminates TLS, set ``DJANGO_TRUST_X_FORWARDED_PROTO=1`` so a request the
proxy received over HTTPS (``X-Forwarded-Proto: https``) is one: only then, because a
client could send that header itself to a server it reaches directly.
"""

from chatsite.settings.base import *  # noqa: F403
from chatsite.settings.base import DATABASE_POOL_MAX_SIZE, database_pool, env

DEBUG = False
SECRET_KEY = env("DJANGO_SECRET_KEY")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS")
DATABASES = {"default": database_pool(env.db("DATABASE_URL"), DATABASE_POOL_MAX_SIZE)}
REDIS_URL = env("REDIS_URL")

# --- HTTPS (Django's deployment checklist; `check --deploy`) ---------------------------
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
# http:// requests are redirected to https://. Off only where something in front
# already redirects every http request (the proxy), never to serve plain HTTP.
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
if env.bool("DJANGO_TRUST_X_FORWARDED_PROTO", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# HSTS: browsers use https only, for a year (the value the HSTS preload list asks for).
# Lower DJANGO_SECURE_HSTS_SECONDS (e.g. 3600) while first trying HTTPS on a domain.
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool(
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True
)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=True)
# Static files are the reverse proxy's (STATIC_ROOT), never the web process's.
SERVE_STATIC = env.bool("DJANGO_SERVE_STATIC", default=False)
