"""``python -m llamaspec serve TARGET [--draft HEAD] ...``: an OpenAI-compatible server."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from .config import ServerConfig


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llamaspec serve",
                                description="OpenAI-compatible server (completions, chat completions, streaming) "
                                            "with speculative decoding and P1..Pk as Prometheus metrics")
    p.add_argument("target", help="target GGUF")
    p.add_argument("--draft", help="draft GGUF: a DSpark/DFlash/EAGLE3 head or a draft model")
    p.add_argument("--spec-type", default="auto", help="as Generator's spec_type (default: auto)")
    p.add_argument("--n-max", type=int, default=8, help="draft depth")
    p.add_argument("--n-seq", type=int, default=8, help="sequences decoded together")
    p.add_argument("--schedule", choices=("fixed", "confidence"), default="fixed",
                   help="fixed: n_max drafts every round; confidence: each request's depth chosen per round")
    p.add_argument("--n-ctx", type=int, default=4096, help="context per sequence")
    p.add_argument("--max-waiting", type=int, default=64, help="requests that may wait for a sequence (then 429)")
    p.add_argument("-t", "--threads", type=int, default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY")
    p.add_argument("--model-name", default=None, help="the model id clients see (default: the target's file name)")
    p.add_argument("--rpc", default=None, metavar="HOST:PORT[,HOST:PORT]",
                   help="RPC servers (python -m llamaspec rpc-server) that hold the target's layers")
    p.add_argument("--shutdown-seconds", type=float, default=10.0,
                   help="on SIGINT/SIGTERM, how long running requests may take to finish")
    p.add_argument("--no-prefix-reuse", action="store_true",
                   help="decode every prompt in full (default: a sequence keeps its cache for the next prompt that "
                        "starts the same way, as a chat's next turn does)")
    args = p.parse_args(argv)
    from .runner import serve

    try:
        serve(ServerConfig(target=args.target, draft=args.draft, spec_type=args.spec_type, n_max=args.n_max,
                           n_seq=args.n_seq, n_ctx=args.n_ctx, n_threads=args.threads, host=args.host,
                           port=args.port, api_key=args.api_key, max_waiting=args.max_waiting,
                           shutdown_seconds=args.shutdown_seconds, model_name=args.model_name,
                           reuse_prefix=not args.no_prefix_reuse, schedule=args.schedule,
                           rpc=args.rpc.split(",") if args.rpc else None))
    except (ValueError, TypeError, RuntimeError, ConnectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
