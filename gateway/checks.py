"""System checks of the gateway's configuration (``manage.py check --database default``,
and every ``manage.py migrate``, which ``make run`` does before starting anything).

- ``gateway.E001``: an enabled embedding pool declares a vector dimension other than
  the stored vectors' (``inference.embeddings.EMBEDDING_DIM``, 384: the pgvector
  columns of memory facts, document chunks and the semantic cache). Its vectors could
  be neither stored nor compared with the stored ones, and the inference tier refuses
  them (``EmbeddingUnavailable`` ``dimension_mismatch``), so this is a startup error,
  not a failure of the first request.

Tagged ``database``: Django runs it only where a database is named (``migrate``,
``check --database``), never while, say, ``makemigrations`` runs on an empty database.
"""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.db import DatabaseError

from inference.embeddings import EMBEDDING_DIM


@checks.register(checks.Tags.database)
def embedding_pool_dimensions_check(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Return an Error per enabled embedding pool whose ``dimensions`` is set and is
    not EMBEDDING_DIM (384). Pools without a declared dimension pass (their workers
    check the model at start). Nothing is checked before the gateway's tables exist.
    """
    if not databases:
        return []
    from gateway.models import ModelPool

    errors: list[checks.CheckMessage] = []
    for alias in databases:
        try:
            pools = list(
                ModelPool.objects.using(alias)
                .filter(kind=ModelPool.Kind.EMBEDDING, enabled=True)
                .exclude(dimensions=None)
                .exclude(dimensions=EMBEDDING_DIM)
                .values_list("name", "model", "dimensions")
            )
        except DatabaseError:  # not migrated yet: migrate adds the columns
            continue
        for name, model, dimensions in pools:
            errors.append(
                checks.Error(
                    f"The embedding pool {name!r} ({model}) declares {dimensions}-d "
                    f"vectors, but the stored vectors are {EMBEDDING_DIM}-d.",
                    hint=f"Serve a {EMBEDDING_DIM}-d model on it and set its "
                    f"dimensions to {EMBEDDING_DIM} (admin: Model pools), or disable "
                    "it. A model of another dimension needs the vector columns "
                    "changed and everything re-embedded.",
                    obj=f"ModelPool {name!r}",
                    id="gateway.E001",
                )
            )
    return errors
