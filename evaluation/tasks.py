"""Celery tasks of evaluation (thin: each calls one service)."""

from celery import shared_task
from django.db import transaction

from evaluation import services
from evaluation.models import EvalRun


@shared_task(name="evaluation.tasks.eval_run", acks_late=True)
def eval_run(run_id: int) -> str:
    """Execute evaluation run ``run_id`` (idempotent: finished case runs are skipped,
    so a redelivered task completes the rest); return its final status."""
    return services.eval_run_execute(run_id=run_id).status


def eval_run_enqueue(*, run: EvalRun) -> None:
    """Start ``run`` on a Celery worker once the current transaction commits."""
    run_id = run.pk
    transaction.on_commit(lambda: eval_run.delay(run_id))
