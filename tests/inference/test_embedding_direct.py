"""The embedding engine's direct forward pass (inference/engines/sbert_direct.py) gives
``SentenceTransformer.encode``'s vectors and token counts.

The model runs in a child process (torch is never loaded in the test process:
tests/conftest.py ``start_embedding_worker``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.stack import ROOT

# Run in a child: the engine as a worker starts it, then every text through encode()
# and through the engine's batches (one text per job, jobs of three, one of many).
_COMPARE = r"""
import asyncio, json, sys
import numpy as np
from inference.engines.sbert import SentenceTransformersEngine

texts = json.loads(sys.stdin.read())
engine = SentenceTransformersEngine(forward_batch=4)
asyncio.run(engine.start())
model = engine._model
want = model.encode(texts, batch_size=4, normalize_embeddings=True,
                    convert_to_numpy=True, show_progress_bar=False)
want_tokens = [len(ids) for ids in model.tokenizer(
    texts, truncation=True, max_length=model.max_seq_length)["input_ids"]]
jobs = [[t] for t in texts] + [texts[i:i + 3] for i in range(0, len(texts), 3)]
results = asyncio.run(engine.embed(jobs)) + asyncio.run(engine.embed([texts]))
least, tokens_equal, at = 1.0, True, 0
for job, result in zip(jobs + [texts], results):
    start = texts.index(job[0])
    got = np.asarray(result.vectors, dtype=np.float64)
    least = min(least, float((got * want[start:start + len(job)]).sum(axis=1).min()))
    tokens_equal &= result.tokens == sum(want_tokens[start:start + len(job)])
    assert got.shape == (len(job), 384) and result.vectors.dtype == np.float32
print(json.dumps({"direct": engine.direct, "least_cosine": least,
                  "tokens_equal": tokens_equal}))
"""

TEXTS = [
    "hi",
    "How do I reset my password?",
    "  Leading and trailing spaces, tabs\tand\nnew lines  ",
    "Ünïcödé, emoji 🙂, 数字 and punctuation — all in one line!",
    "The quarterly report shows revenue grew 4% while costs fell.",
    # longer than the model's 256 word pieces: cut the same way by both
    " ".join(["a fox jumps over the lazy dog near the river bank"] * 40),
    "Could you tell me a short story about a river, a lamp and a cedar tree?",
]


def test_direct_forward_pass_gives_encodes_vectors_and_token_counts():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _COMPARE],
        input=json.dumps(TEXTS),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["direct"] is True  # all-MiniLM-L6-v2 takes the direct path
    assert out["least_cosine"] >= 0.9999
    assert out["tokens_equal"] is True


# Where the engine runs a batch: a short one on the calling (event loop) thread, a
# long one in a thread of its own.
_WHERE = r"""
import asyncio, json, threading
from inference.engines import sbert

engine = sbert.SentenceTransformersEngine(forward_batch=4)
asyncio.run(engine.start())
ran_on = []
run = engine._run
def spy(batch):
    ran_on.append(threading.current_thread() is threading.main_thread())
    return run(batch)
engine._run = spy
short = ["How do I reset my password?"] * 3
long = " ".join(["a fox jumps over the lazy dog"] * 20)
assert sum(map(len, short)) <= sbert.INLINE_CHARS < len(long)
asyncio.run(engine.embed([short[:1], short[1:]]))
asyncio.run(engine.embed([[long]]))
print(json.dumps({"on_loop": ran_on}))
"""


def test_a_short_batch_runs_on_the_loop_and_a_long_one_in_a_thread():
    done = subprocess.run(
        [sys.executable, "-c", _WHERE],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "on_loop": [True, False]
    }
