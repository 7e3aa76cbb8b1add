"""Write answers of the embedded model (SmolLM2 via llama.cpp) to training-side prompts.

    nice -n 19 .venv/bin/python scripts/smollm2_answers.py [--out PATH] [--max-tokens 96]

Prompts (no evaluation corpus is read): every ``everyday`` benign example of
``moderation_train.jsonl`` and a seeded sample of each training-side corpus
(``safety.dataset.TRAIN_CORPORA``); a corpus text that is not a question is asked
about ("Explain this: ..."). Each answer is sampled as the chat default does
(temperature 0.7, the prompt's index as seed) from the bundled GGUF, rendered with the
model's own chat template (:class:`inference.engines.llamacpp_prompt.ChatPrompt`). One JSON
line per answer: ``{"id", "source", "prompt", "answer", "tokens"}``; a rerun appends
only the ids missing from ``--out``, in a seeded order (so it can be stopped and
resumed, and a partial file samples every source);
``--shard k/n`` writes every n-th prompt, for n processes on n cores.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "safety" / "data" / "answers_smollm2.jsonl"
PER_CORPUS = 130
# The prompt list is pinned (ids index it): the training set's first lines and the
# training-side corpora as they were when the first answers were written; data added to
# training later does not shift the ids of the answers already in the file.
TRAIN_LINES = 3525
CORPORA = ("train_fortunes", "train_manpages", "train_python_library")
SEED = 24
ASK = ("Explain this: ", "What does this mean? ", "Tell me more about this: ")


def prompts_build() -> list[tuple[str, str]]:
    """The (source, prompt) pairs, in a fixed order."""
    out: list[tuple[str, str]] = []
    train = ROOT / "safety" / "data" / "moderation_train.jsonl"
    for line in train.read_text(encoding="utf-8").splitlines()[:TRAIN_LINES]:
        row = json.loads(line)
        if not row["labels"] and "everyday" in row.get("tags", []):
            out.append(("everyday", row["text"]))
    rng = random.Random(SEED)
    for name in CORPORA:
        path = ROOT / "safety" / "data" / "corpora" / f"{name}.jsonl"
        rows = [json.loads(x)["text"] for x in path.read_text().splitlines() if x]
        for text in rng.sample(rows, PER_CORPUS):
            text = text[:600]
            if not text.rstrip().endswith("?"):
                text = rng.choice(ASK) + text
            out.append((path.stem, text))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument(
        "--shard", default="0/1", help="k/n: only the prompts whose index is k mod n"
    )
    args = parser.parse_args()

    from llama_cpp import Llama

    from inference.engines.llamacpp_prompt import ChatPrompt, bundled_model_path

    shard, shards = (int(x) for x in args.shard.split("/"))
    prompts = prompts_build()
    if args.limit:
        prompts = prompts[: args.limit]
    done: set[int] = set()
    if args.out.exists():
        done = {json.loads(x)["id"] for x in args.out.read_text().splitlines() if x}
    llm = Llama(
        model_path=str(bundled_model_path()),
        n_ctx=1024,
        n_threads=args.threads,
        verbose=False,
    )
    chat = ChatPrompt(llm)
    started = time.monotonic()
    written = 0
    with args.out.open("a", encoding="utf-8") as out:
        # a seeded order, so a partial file samples every source
        order = list(range(len(prompts)))
        random.Random(SEED).shuffle(order)
        for i in order:
            source, prompt = prompts[i]
            if i in done or i % shards != shard:
                continue
            tokens = chat.tokens([{"role": "user", "content": prompt}], llm=llm)
            llm.reset()
            llm.set_seed(i)
            answer_ids: list[int] = []
            for token in llm.generate(tokens, temp=0.7, top_p=0.95, top_k=40):
                if token in chat.stop_ids or len(answer_ids) >= args.max_tokens:
                    break
                answer_ids.append(token)
            answer = llm.detokenize(answer_ids).decode("utf-8", errors="ignore")
            row = {
                "id": i,
                "source": source,
                "prompt": prompt,
                "answer": answer,
                "tokens": len(answer_ids),
            }
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            out.flush()
            written += 1
            if written % 50 == 0:
                rate = written / (time.monotonic() - started)
                print(f"{written} written ({rate:.2f} answers/s)", flush=True)


if __name__ == "__main__":
    main()
