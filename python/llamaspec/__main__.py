"""Command line: generate with a target (and a draft) and print the text plus a P1..Pk table.

    python -m llamaspec -m target.gguf -md draft.gguf -p "Once upon a time" -n 64
    python -m llamaspec -m target.gguf --spec-type ngram -p "..."        # n-gram self-speculation
    python -m llamaspec -m target.gguf -md draft.gguf --schedule confidence -p "..."
    python -m llamaspec demo                                             # builds its own models
    python -m llamaspec serve target.gguf --draft head.gguf --port 8080  # OpenAI-compatible server
    python -m llamaspec rpc-server --host 127.0.0.1 --port 50052        # holds layers for rpc=[...] clients
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional, Sequence

from .generator import Generator


def _add_generation_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-p", "--prompt", default="The quick brown fox jumps over the lazy dog. The quick brown")
    parser.add_argument("-n", "--max-tokens", type=int, default=64)
    parser.add_argument("--n-max", type=int, default=8, help="draft depth k")
    parser.add_argument("--schedule", choices=("fixed", "confidence"), default="fixed",
                        help="confidence: choose the draft depth per round (0..n-max)")
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("-t", "--threads", type=int, default=None)
    parser.add_argument("--temp", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=40)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--min-p", type=float, default=0.05)
    parser.add_argument("-s", "--seed", type=int, default=0)
    parser.add_argument("--ignore-eos", action="store_true")
    parser.add_argument("--json", help="also write the statistics to this JSON file")
    parser.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's logs")
    parser.add_argument("--rpc", default=None, metavar="HOST:PORT[,HOST:PORT]",
                        help="RPC servers (python -m llamaspec rpc-server) that hold the target's layers")


def run_one(target: str, draft: Optional[str], spec_type: str, args: argparse.Namespace) -> dict:
    with Generator(target, draft, n_max=args.n_max, spec_type=spec_type, n_ctx=args.n_ctx,
                   n_threads=args.threads, schedule=getattr(args, "schedule", "fixed"), verbose=args.verbose,
                   rpc=getattr(args, "rpc", None)) as gen:
        result = gen.generate(args.prompt, args.max_tokens, temperature=args.temp, top_k=args.top_k,
                              top_p=args.top_p, min_p=args.min_p, seed=args.seed, ignore_eos=args.ignore_eos)
        print(f"=== {gen.spec_type} (n_max {gen.n_max}, {gen.schedule} schedule) target {target}" +
              (f", draft {draft}" if draft else ""))
        print(args.prompt + result.text)
        print(f"--- stop: {result.stop_reason}")
        print(result.stats.table())
        if gen.schedule == "confidence":
            depths = result.stats.chosen_depth
            print("chosen depth per round: " + " ".join(map(str, depths.tolist())))
        print()
        return {"target": target, "draft": draft, "prompt": args.prompt, "text": result.text,
                "tokens": result.tokens, "stop_reason": result.stop_reason, **result.stats.summary()}


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "demo":
        from .demo import main as demo_main
        return demo_main(argv[1:])
    if argv and argv[0] == "serve":
        try:
            from .server.cli import main as serve_main
        except ImportError as exc:
            print(f"error: the server needs its extra: pip install 'llamaspec[server]' ({exc})", file=sys.stderr)
            return 2
        return serve_main(argv[1:])
    if argv and argv[0] == "rpc-server":
        from .rpc import main as rpc_main
        code = rpc_main(argv[1:])
        # the server thread is inside ggml's accept loop for good: leave without running exit handlers
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    parser = argparse.ArgumentParser(prog="python -m llamaspec", description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--target", required=True, help="target GGUF")
    parser.add_argument("-md", "--draft", help="draft GGUF (DSpark/DFlash head or draft model)")
    parser.add_argument("--spec-type", default="auto")
    _add_generation_args(parser)
    args = parser.parse_args(argv)
    try:
        record = run_one(args.target, args.draft, args.spec_type, args)
    except (ValueError, RuntimeError, TypeError, ConnectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
