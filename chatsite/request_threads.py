"""Kept threads for the site's sync chains: a request's thread-sensitive calls run on
one of them (:func:`request_thread_lease`), given back when the request ends
(:func:`request_thread_return`), as a WSGI server's thread pool does; at most
WEB_SYNC_CONCURRENCY are kept idle. A thread started and joined per request cost ~70 us
of CPU (bench/request_threads.py)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import SyncToAsync
from django.conf import settings


class RequestThread(ThreadPoolExecutor):
    """A sync thread kept for the next request: one request's thread-sensitive calls
    at a time (:func:`request_thread_lease`), one worker, started on first use and
    reused after (a thread started per request cost ~70 us of CPU to start and end,
    and asgiref joined it from another thread started for that).

    :meth:`shutdown` gives the thread back (:func:`request_thread_return`) rather than
    ending it; falsy, so that asgiref's ``ThreadSensitiveContext.__aexit__`` neither
    shuts it down nor starts a thread to join it."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="request-sync")
        self.leased = False

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Give the thread back once its queued calls have run (never ends it)."""
        request_thread_return(self)

    def __bool__(self) -> bool:
        """False: see the class."""
        return False


_idle_threads: list[RequestThread] = []
_idle_lock = threading.Lock()


def request_thread_lease() -> RequestThread | None:
    """Give the running request (inside its ``ThreadSensitiveContext``, before its
    first sync call) a kept thread for its thread-sensitive calls: an idle one, else a
    new one. Returns it (give it back with :func:`request_thread_return` when the
    request ends), or None outside such a context or where the context has its
    executor already."""
    context = SyncToAsync.thread_sensitive_context.get(None)
    if context is None or context in SyncToAsync.context_to_thread_executor:
        return None
    with _idle_lock:
        thread = _idle_threads.pop() if _idle_threads else None
    if thread is None:
        thread = RequestThread()
    thread.leased = True
    SyncToAsync.context_to_thread_executor[context] = thread
    return thread


def _thread_idle(thread: RequestThread) -> None:
    """In ``thread`` itself, after every call queued before it: keep it idle (at most
    WEB_SYNC_CONCURRENCY kept: as many chains as run at once), else end it."""
    with _idle_lock:
        if len(_idle_threads) < settings.WEB_SYNC_CONCURRENCY:
            _idle_threads.append(thread)
            return
    ThreadPoolExecutor.shutdown(thread, wait=False)


def request_thread_return(thread: RequestThread) -> None:
    """Give a leased thread back (idempotent). It becomes idle once the calls queued
    on it have run (a sync chain the request abandoned, its client gone, finishes
    first): the next request never waits behind another's work."""
    if not thread.leased:
        return
    thread.leased = False
    try:
        thread.submit(_thread_idle, thread)
    except RuntimeError:  # shut down with the interpreter
        pass
