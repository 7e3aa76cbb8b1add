"""The hash tags that keys of several owners share (why keys carry a tag:
:mod:`inference.keys`): ``{<job_id>}`` per generation (a job id ``<group>.<n>`` is
tagged by its group, so one request's jobs share a slot: :func:`job_ids_grouped`),
``{u:<user_id>}`` per user, ``{p:<pool>}`` per pool. A tag that one owner's keys
alone carry is written beside them.
"""

from __future__ import annotations


def job_tag(job_id: str) -> str:
    """Return the hash tag of a job's keys: its group (before the first ``.``) or its id."""
    return job_id.split(".", 1)[0]


def tagged_job(job_id: str) -> str:
    """Return ``job_id`` as its keys write it: its tag in braces, then the rest of it."""
    tag = job_tag(job_id)
    return f"{{{tag}}}{job_id[len(tag) :]}"


def job_ids_grouped(base: str, count: int) -> list[str]:
    """Return ``count`` job ids ``<base>.<n>`` whose keys share one slot (one request's
    jobs, read together by one XREAD)."""
    return [f"{base}.{n}" for n in range(count)]


def tagged_user(user_id: int) -> str:
    """Return the tag of a user's keys, braces included (``{u:<user_id>}``)."""
    return f"{{u:{user_id}}}"


def tagged_pool(pool: str) -> str:
    """Return the tag of a pool's keys, braces included (``{p:<pool>}``)."""
    return f"{{p:{pool}}}"
