"""Conversation search benchmark: latency of the full-text search over 100,000 messages.

    .venv/bin/python bench/search.py [--messages 100000] [--users 50] [--queries 200]

Runs on the dev services (`make migrate` first), inside one transaction that is
rolled back at the end: nothing stays in the database.

1. Seed: --users users, each with conversations of 20 messages (a user question
   then an answer, alternating), --messages in all, bulk-inserted (bulk_create); the
   generated search columns and their GIN indexes are filled by PostgreSQL on insert.
   Texts are real English: sentences of the installed Django package's docstrings,
   1-2 per question and 2-8 per answer, mixed with everyday chat phrases, so the
   vocabulary has a long tail as real chats do. Then ANALYZE.
2. --queries searches, each for a random user and a random query: a single word
   drawn from the corpus (frequent or rare), two words, a quoted phrase, a word
   with an excluded word (websearch syntax), or the first 3 letters or more of a
   word (every word of a query is a prefix). Each is timed end to end through
   conversations.search.conversation_search (title query, ranked message query,
   snippets of the shown rows: three SQL queries), p50/p99 in ms; the message
   query's plan is printed once.
"""

from __future__ import annotations

import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import django_start, option_parser  # noqa: E402
from bench.corpus import CHAT_PHRASES, docstrings  # noqa: E402
from bench.record import bench_record, pct  # noqa: E402


def sentences(limit: int) -> list[str]:
    """Return up to ``limit`` English sentences (30-300 characters) split from the
    installed Django's docstrings (bench/retrieval.py's corpus)."""
    out: list[str] = []
    for doc in docstrings(10**9, min_chars=1):  # until ``limit`` sentences
        for s in re.split(r"(?<=[.?!])\s+", " ".join(doc.split())):
            if 30 <= len(s) <= 300:
                out.append(s)
                if len(out) >= limit:
                    return out
    return out


def main() -> None:

    parser = option_parser(messages=100_000, users=50, queries=200)
    args = parser.parse_args()

    django_start()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from conversations.models import Conversation, Message
    from conversations.search import TsQuery, conversation_search, prefix_tsquery

    rng = random.Random(0)
    pool = sentences(20_000) + CHAT_PHRASES * 200
    words = [w.lower() for s in pool for w in re.findall(r"[A-Za-z]{4,}", s)]
    counts: dict[str, int] = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1
    vocabulary = sorted(counts, key=lambda w: counts[w], reverse=True)
    frequent, rare = vocabulary[:300], vocabulary[300:]
    print(
        f"corpus: {len(pool):,} sentences, {len(vocabulary):,} distinct words "
        f"(4+ letters)"
    )

    def text(n_min: int, n_max: int) -> str:
        return " ".join(rng.choice(pool) for _ in range(rng.randint(n_min, n_max)))

    User = get_user_model()
    with transaction.atomic():
        users = [
            User.objects.create(username=f"bench-search-{i}") for i in range(args.users)
        ]
        t0 = time.perf_counter()
        per_conversation = 20
        conversations = [
            Conversation(user=users[i % len(users)], title=text(1, 1)[:80])
            for i in range(args.messages // per_conversation)
        ]
        Conversation.objects.bulk_create(conversations, batch_size=2000)
        batch: list[Message] = []
        total_chars = 0
        for conv in conversations:
            question = None
            for j in range(per_conversation):
                if j % 2 == 0:
                    question = Message(
                        conversation=conv, role="user", content=text(1, 2)
                    )
                    batch.append(question)
                else:
                    batch.append(
                        Message(
                            conversation=conv,
                            role="assistant",
                            parent=question,
                            content=text(2, 8),
                            model="bench",
                        )
                    )
                total_chars += len(batch[-1].content)
            if len(batch) >= 5000:
                Message.objects.bulk_create(batch)
                batch = []
        Message.objects.bulk_create(batch)
        with connection.cursor() as c:
            c.execute("ANALYZE conversations_message")
            c.execute("ANALYZE conversations_conversation")
        n = Message.objects.filter(conversation__user__in=users).count()
        took = time.perf_counter() - t0
        print(
            f"seeded {n:,} messages ({total_chars / n:.0f} chars mean) in "
            f"{len(conversations):,} conversations of {len(users)} users in "
            f"{took:.1f} s (bulk_create; search columns generated on insert)"
        )

        def query() -> str:
            kind = rng.random()
            if kind < 0.3:
                return rng.choice(frequent)
            if kind < 0.5:
                return rng.choice(rare)
            if kind < 0.65:
                return f"{rng.choice(frequent)} {rng.choice(rare)}"
            if kind < 0.75:
                words_of = re.findall(r"[A-Za-z]+", rng.choice(pool))
                start = rng.randrange(max(1, len(words_of) - 2))
                return '"' + " ".join(words_of[start : start + 3]) + '"'
            if kind < 0.85:
                return f"{rng.choice(frequent)} -{rng.choice(frequent)}"
            # the start of a word, as typed before it is finished
            word = rng.choice(vocabulary)
            return word[: rng.randint(3, max(3, len(word) - 1))]

        plan_user = users[0]
        for planned in (frequent[0], rare[0], rare[0][:4]):
            with connection.cursor() as c:
                sql, params = (
                    Message.objects.filter(
                        conversation__user=plan_user,
                        search_vector=TsQuery(
                            prefix_tsquery(
                                text=planned, config=settings.CHAT_SEARCH_CONFIG
                            )
                        ),
                    )
                    .values("id")
                    .query.sql_with_params()
                )
                c.execute("EXPLAIN " + sql, params)
                plan = " | ".join(r[0].strip() for r in c.fetchall())
            index = "msg_search_gin" if "msg_search_gin" in plan else "no GIN index"
            print(f"message query plan ({planned!r}, {index}): {plan[:300]}")

        for label, queries in (("warm-up", 20), ("measured", args.queries)):
            latencies: list[float] = []
            hits: list[int] = []
            for _ in range(queries):
                user, q = rng.choice(users), query()
                s = time.perf_counter()
                results = conversation_search(user=user, query=q)
                latencies.append((time.perf_counter() - s) * 1000)
                hits.append(len(results))
            if label == "measured":
                print(
                    f"search ({queries} queries, random users and words): "
                    f"p50 {pct(latencies, 50):.1f} ms, p99 {pct(latencies, 99):.1f} ms, "
                    f"max {max(latencies):.1f} ms; results per query: median "
                    f"{pct([float(h) for h in hits], 50):.0f}, "
                    f"{sum(1 for h in hits if h == 0)} with none"
                )
                for q in (50, 99):
                    bench_record(
                        bench="search",
                        metric=f"search p{q}",
                        value=pct(latencies, q),
                        unit="ms",
                        params=f"{args.messages} messages, {args.users} users, "
                        f"{queries} queries",
                    )
        transaction.set_rollback(True)


if __name__ == "__main__":
    main()
