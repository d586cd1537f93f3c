"""Soak test of ``llamaspec serve``: many mixed requests against one server, its memory, errors and outputs.

One server (a process of its own, the tiny qwen3 target with its 2-layer draft, 4 sequences) gets --requests
requests from 8 concurrent clients, drawn at random (seeded): streamed or not, chat or completion, greedy or
sampled, with and without stop strings, clients that hang up mid-stream, and bad requests (wrong types,
unsupported fields, prompts longer than the context). Checked: no good request fails, every bad one gets its
4xx, every greedy answer equals what a solo ``Generator.generate`` / ``chat`` gives, and the server's resident
memory after warm-up (the first 10% of requests) grows by less than 5% to the end.

    python bench/serve_soak.py [--requests 1000]

Writes bench/results/serve/serve_soak.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx

import llamaspec
from llamaspec import testing

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve import OurServer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "serve"
PROMPTS = ["Hello world, this is", "def fib(n):", "the cat the cat the cat", "Once upon a time",
           "Speculative decoding uses", "A token is a piece of", "The numbers one, two,", "We think that"]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def make_request(rng: random.Random) -> dict:
    """One request: its endpoint, body, whether it streams / hangs up, and what it expects."""
    kind = rng.choices(["completion", "chat", "bad", "hangup"], weights=[45, 35, 10, 10])[0]
    prompt = rng.choice(PROMPTS)
    greedy = rng.random() < 0.6
    body = {"max_tokens": rng.randint(1, 48), "temperature": 0 if greedy else 0.8, "seed": rng.randint(0, 9)}
    if rng.random() < 0.3:
        body["stop"] = [rng.choice([",", ".", " the", "\n"])]
    stream = rng.random() < 0.5
    if kind == "bad":
        bad = rng.choice([{"prompt": 3}, {"prompt": prompt, "n": 2}, {"prompt": prompt, "max_tokens": 0},
                          {"prompt": "word " * 3000}, {"prompt": prompt, "logprobs": 1}, {"prompt": prompt, "top_p": 0}])
        return {"kind": "bad", "path": "/v1/completions", "body": {**body, **bad}, "stream": False}
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        return {"kind": kind, "path": "/v1/chat/completions", "body": body, "stream": stream, "greedy": greedy}
    body["prompt"] = prompt
    if kind == "hangup":
        body["max_tokens"] = 400
        return {"kind": kind, "path": "/v1/completions", "body": body, "stream": True}
    return {"kind": kind, "path": "/v1/completions", "body": body, "stream": stream, "greedy": greedy}


async def send(client: httpx.AsyncClient, req: dict) -> dict:
    body = {**req["body"], "stream": req["stream"]}
    if not req["stream"]:
        r = await client.post(req["path"], json=body)
        if r.status_code != 200:
            return {"status": r.status_code}
        data = r.json()["choices"][0]
        return {"status": 200, "text": data["message"]["content"] if "message" in data else data["text"]}
    parts = []
    async with client.stream("POST", req["path"], json=body) as r:
        if r.status_code != 200:
            return {"status": r.status_code}
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                return {"status": 500, "error": event["error"]}
            choice = event["choices"][0] if event["choices"] else None
            if choice is not None:
                parts.append((choice.get("delta") or {}).get("content") or choice.get("text") or "")
            if req["kind"] == "hangup" and len(parts) >= 3:
                return {"status": 200, "hung_up": True}  # leaving the block closes the connection
    return {"status": 200, "text": "".join(parts)}


def expected_text(gen: llamaspec.Generator, req: dict) -> str:
    b = req["body"]
    stop = b.get("stop")
    if "messages" in b:
        return gen.chat(b["messages"], b["max_tokens"], stop=stop).text
    return gen.generate(b["prompt"], b["max_tokens"], stop=stop).text


async def run(port: int, requests: list, clients: int, on_progress) -> list:
    queue: asyncio.Queue = asyncio.Queue()
    for i, r in enumerate(requests):
        queue.put_nowait((i, r))
    results = [None] * len(requests)

    async def worker() -> None:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            while not queue.empty():
                i, req = queue.get_nowait()
                results[i] = await send(client, req)
                on_progress(i)

    await asyncio.gather(*(worker() for _ in range(clients)))
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS / "serve_soak"))
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="llamaspec-soak-"))
    testing.write_all(work, seed=0)
    target, draft = str(work / "target.gguf"), str(work / "draft_simple.gguf")
    rng = random.Random(args.seed)
    requests = [make_request(rng) for _ in range(args.requests)]
    t0 = time.time()
    memory = []
    with OurServer(target, draft, "draft-simple", 4, 4, 1024, 2) as srv:
        warm = max(1, args.requests // 10)
        finished = [0]

        def progress(_index: int) -> None:
            finished[0] += 1
            done = finished[0]
            if done == warm or done % max(1, args.requests // 20) == 0 or done == args.requests:
                memory.append((done, rss_mib(srv.proc.pid)))

        results = asyncio.run(run(srv.port, requests, args.clients, progress))
    seconds = time.time() - t0
    gen = llamaspec.Generator(target, draft, spec_type="draft-simple", n_max=4, n_ctx=1024)
    failures, bad_ok, greedy_checked, greedy_equal = [], 0, 0, 0
    for i, (req, res) in enumerate(zip(requests, results)):
        if req["kind"] == "bad":
            bad_ok += 400 <= res["status"] < 500
            if not 400 <= res["status"] < 500:
                failures.append((i, "bad request not refused", res))
            continue
        if res["status"] != 200:
            failures.append((i, "good request failed", res))
            continue
        if req["kind"] != "hangup" and req.get("greedy"):
            greedy_checked += 1
            if res["text"] == expected_text(gen, req):
                greedy_equal += 1
            else:
                failures.append((i, "greedy answer differs from solo generate", req["body"]))
    gen.close()
    after_warmup = [m for d, m in memory if d >= warm]
    growth = (after_warmup[-1] - after_warmup[0]) / after_warmup[0] if len(after_warmup) > 1 else 0.0
    kinds = {k: sum(1 for r in requests if r["kind"] == k) for k in ("completion", "chat", "bad", "hangup")}
    report = {"settings": vars(args), "seconds": round(seconds, 1), "kinds": kinds,
              "streamed": sum(1 for r in requests if r["stream"]), "bad_refused": bad_ok,
              "greedy_checked": greedy_checked, "greedy_equal": greedy_equal, "failures": failures[:20],
              "n_failures": len(failures), "rss_mib": memory, "rss_growth_after_warmup": growth}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    text = "\n".join([
        "# llamaspec serve soak test", "",
        f"`python bench/serve_soak.py {' '.join(sys.argv[1:] if argv is None else argv)}` ({seconds:.0f} s): "
        f"{args.requests} requests from {args.clients} concurrent clients to one server (tiny qwen3 target + "
        "2-layer draft, draft-simple depth 4, 4 sequences).", "",
        f"- requests: {kinds['completion']} completions, {kinds['chat']} chats, {kinds['bad']} bad, "
        f"{kinds['hangup']} clients hanging up mid-stream; {report['streamed']} streamed",
        f"- failures: {len(failures)} (good requests failed, bad ones not refused, greedy answers unequal)",
        f"- bad requests answered 4xx: {bad_ok}/{kinds['bad']}",
        f"- greedy answers equal to a solo Generator: {greedy_equal}/{greedy_checked}",
        f"- server resident memory after warm-up ({warm} requests): {after_warmup[0]:.1f} MiB -> "
        f"{after_warmup[-1]:.1f} MiB ({100 * growth:+.1f}%); samples: "
        + ", ".join(f"{d}: {m:.1f}" for d, m in memory), ""])
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0 if not failures and growth < 0.05 else 1


if __name__ == "__main__":
    raise SystemExit(main())
