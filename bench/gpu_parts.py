"""The measurements of a GPU check (bench/gpu.py runs them; each gets a time budget and saves as it goes).

lossless   greedy speculative == plain decoding, batched == solo: draft-simple, n-gram, DSpark, depths 1..8,
           B = 1, 4, 16, tiny models (counts of equal outputs).
cost       the verification cost curve cost(k)/cost(1), k = 1..16, on the large model (bench/verify_cost.py's
           measure), with the CUDA matmul kernel each width takes (bench/gpu_kernels.py).
cupy       Context.logits/features(device="cuda") as cupy arrays, equal to the numpy ones.
speed      tok/s of plain vs draft-simple vs Batch (B = 1, 4, 16) on the large model.

Every part is a function part(run) where ``run`` (bench/gpu.py's PartRun) holds the models, the settings, the
deadline and ``run.save(data)``, which stores the part's results so far (a part cut by its timeout keeps them).
"""

from __future__ import annotations

import statistics
import sys
import time
import types

import numpy as np

import llamaspec

EXTRA_PROMPTS = ["the cat the cat the cat the cat",
                 "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
                 "Once upon a time"]
# (label, spec_type, draft in the tiny set or None)
METHODS = [("draft-simple", "draft-simple", "draft_simple"), ("n-gram", "ngram-simple", None),
           ("DSpark", "draft-dspark", "dspark")]
DEPTH_ORDER = [1, 8, 4, 2, 6, 3, 5, 7]  # a part cut by its budget still spans the range


def prompts(n: int, chars: int = 200) -> list:
    """n distinct prompts: the built-in suite's, cut to ``chars`` characters, then EXTRA_PROMPTS."""
    from llamaspec.evaluate import builtin_prompts

    texts = [p["prompt"][:chars] for p in builtin_prompts()] + EXTRA_PROMPTS
    if n > len(texts):
        raise ValueError(f"at most {len(texts)} prompts")
    return texts[:n]


class Pacer:
    """Runs units of work while the slowest unit so far still fits in the time left (the first always runs)."""

    def __init__(self, run):
        self.run = run
        self.slowest = 0.0
        self.skipped = 0

    def fits(self) -> bool:
        if self.slowest == 0.0 or self.run.left() > self.slowest:
            return True
        self.skipped += 1
        return False

    def timed(self, fn, *args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        self.slowest = max(self.slowest, time.perf_counter() - t0)
        return out


# --------------------------------------------------------------------------------------------------------
# 1. lossless
# --------------------------------------------------------------------------------------------------------
def lossless(run) -> None:
    s = run.settings["lossless"]
    tiny = run.models["tiny"]
    target = llamaspec.Model(tiny["target"])
    texts = prompts(s["prompts"])
    kw = dict(max_tokens=s["tokens"], ignore_eos=True)
    common = dict(n_ctx=512, n_threads=run.threads)
    batches = s["batches"]

    with llamaspec.Generator(target, spec_type="none", n_ctx=512, n_threads=run.threads) as plain:
        reference = [list(plain.generate(p, **kw).tokens) for p in texts]
    data = {"prompts": len(texts), "tokens": s["tokens"], "batches": batches, "depths_planned": s["depths"],
            "plain_batch": {}, "rows": []}

    def batch_tokens(spec_type, draft, depth, b):
        with llamaspec.Batch(target, draft, spec_type=spec_type, n_seq=b, n_max=depth, ngram_size_n=key(depth),
                             **common) as batch:
            results = batch.generate(texts[:b], **kw)
        return [list(r.tokens) for r in results], results

    pacer = Pacer(run)
    for b in batches:  # plain batched decoding against one sequence at a time
        if pacer.fits():
            got, _ = pacer.timed(batch_tokens, "none", None, 1, b)
            data["plain_batch"][str(b)] = equal(got, reference)
    run.save(data)
    for depth in [d for d in DEPTH_ORDER if d in s["depths"]]:
        for label, spec_type, draft_name in METHODS:
            if not pacer.fits():
                continue
            t0 = time.perf_counter()
            draft = llamaspec.Model(tiny[draft_name]) if draft_name else None
            with llamaspec.Generator(target, draft, spec_type=spec_type, n_max=depth, ngram_size_n=key(depth),
                                     **common) as gen:
                solo = [gen.generate(p, **kw) for p in texts]
            solo_tokens = [list(r.tokens) for r in solo]
            row = {"method": label, "spec_type": spec_type, "depth": depth, "ngram_size_n": key(depth),
                   "solo_vs_plain": equal(solo_tokens, reference),
                   "drafted": int(sum(r.stats.n_drafted for r in solo)),
                   "accepted": int(sum(r.stats.n_accepted for r in solo)), "batch": {}}
            for b in batches:
                got, results = batch_tokens(spec_type, draft, depth, b)
                row["batch"][str(b)] = {"vs_plain": equal(got, reference), "vs_solo": equal(got, solo_tokens),
                                        "drafted": int(sum(r.stats.n_drafted for r in results))}
            pacer.slowest = max(pacer.slowest, time.perf_counter() - t0)
            data["rows"].append(row)
            run.save(data)
    data["units_skipped_for_time"] = pacer.skipped
    run.save(data)


def key(depth: int) -> int:
    """n-gram key length: 2, or 1 at depth 1 (llama.cpp's ngram-simple drafts nothing when n_max < the key length)."""
    return min(2, depth)


def equal(got: list, expected: list) -> list:
    """[equal, compared]: how many token lists equal their counterpart."""
    return [sum(a == b for a, b in zip(got, expected)), len(got)]


# --------------------------------------------------------------------------------------------------------
# 2. verification cost curve
# --------------------------------------------------------------------------------------------------------
def cost(run) -> None:
    import gpu_kernels
    import verify_cost

    s = run.settings["cost"]
    large = large_model(run)
    model = llamaspec.Model(large["target"])
    cc, cc_source = compute_capability()
    weight_types = gpu_kernels.weight_types_of(large["target"])
    n_kv = 256  # the cache cells a pass after verify_cost.CONTEXT (128) tokens reads: llama.cpp pads to 256
    data = {"model": large["shape_name"], "context": verify_cost.CONTEXT, "k_max": verify_cost.K_MAX,
            "repeats": s["repeats"], "runs": s["runs"], "devices": model.devices,
            "kernels": {"cc": cc, "cc_source": cc_source, "n_kv": n_kv,
                        "table": gpu_kernels.kernel_table(large["shape"], weight_types, cc, n_kv,
                                                          verify_cost.K_MAX),
                        "how": "derived from ggml-cuda's dispatch rules (bench/gpu_kernels.py), not observed"}}
    run.save(data)
    # verify_cost measures its two sides (few-column CPU kernels off / on) on two copies of the model; on a GPU
    # those switches change nothing, so the two sides are two samples of one measure (their spread: the noise).
    curve = verify_cost.cost_curve({False: model, True: model}, run.threads, s["repeats"], s["runs"])
    data["curve"] = curve["curve"]
    data["sides"] = ("off/on: CPU few-column kernels off/on" if not model.devices else
                     "off/on: two interleaved samples of the same GPU measure (the CPU switch does nothing there)")
    run.save(data)


def compute_capability() -> tuple:
    """(cc as ggml writes it, e.g. 900; where it came from): nvidia-smi, else the sm_90 build's target."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout.split()
            major, minor = out[0].split(".")
            return int(major) * 100 + int(minor) * 10, "nvidia-smi"
        except (IndexError, ValueError, OSError, subprocess.SubprocessError):
            pass
    return 900, "assumed (sm_90, the architecture tools/gpu_check.sh builds for)"


# --------------------------------------------------------------------------------------------------------
# 3. cupy
# --------------------------------------------------------------------------------------------------------
def cupy_arrays(run) -> None:
    data: dict = {}
    if not llamaspec.supports_gpu_offload():
        data["status"] = "skipped: no CUDA"
        if run.dry_run:  # rehearse the checks with a numpy stand-in, so the GPU run meets no Python error
            with numpy_cupy() as fake:
                data["rehearsal"] = cupy_checks(run, fake)
            data["rehearsal"]["with"] = "a numpy stand-in for cupy (no CUDA here)"
        run.save(data)
        return
    try:
        import cupy
    except ImportError as exc:
        data["status"] = f"skipped: cupy not installed ({exc})"
        run.save(data)
        return
    data.update(cupy_checks(run, cupy))
    data["cupy"] = cupy.__version__
    data["status"] = "ok" if all(c["equal"] for c in data["checks"]) else "differs"
    run.save(data)


def cupy_checks(run, cupy) -> dict:
    """Logits and layer-1 features of a short prompt, as numpy and as cupy arrays, on the tiny and the large model."""
    checks, bad_device = [], None
    paths = [("tiny", run.models["tiny"]["target"])]
    if run.models.get("large"):
        paths.append(("large", run.models["large"]["target"]))
    for label, path in paths:
        model = llamaspec.Model(path)
        ctx = llamaspec.Context(model, n_ctx=128, capture_layers=[1], n_threads=run.threads)
        ctx.decode(model.tokenize(b"Hello world, this is a test of the cupy path.", True))
        for what, host, on_device in (("logits", ctx.logits(), lambda: ctx.logits(device="cuda")),
                                      ("features(1)", ctx.features(1), lambda: ctx.features(1, device="cuda"))):
            t0 = time.perf_counter()
            dev = on_device()
            seconds = time.perf_counter() - t0
            back = dev.get()
            checks.append({"model": label, "what": what, "shape": list(host.shape),
                           "is_cupy": isinstance(dev, cupy.ndarray), "dtype": str(dev.dtype),
                           "equal": bool(isinstance(dev, cupy.ndarray) and np.array_equal(back, host)),
                           "max_abs_diff": float(np.abs(back - host).max()), "seconds": seconds})
        try:
            ctx.logits(device="tpu")
            bad_device = "no error"
        except ValueError as exc:
            bad_device = f"ValueError: {exc}"
    return {"checks": checks, "device='tpu'": bad_device}


class numpy_cupy:
    """Context manager: a module named cupy whose arrays are numpy arrays with .get() (the dry run's stand-in)."""

    class ndarray(np.ndarray):
        def get(self):
            return np.asarray(self)

    def __enter__(self):
        self.saved = sys.modules.get("cupy")
        fake = types.ModuleType("cupy")
        fake.ndarray = self.ndarray
        fake.asarray = lambda a: np.array(a).view(self.ndarray)
        fake.__version__ = "numpy stand-in"
        sys.modules["cupy"] = fake
        return fake

    def __exit__(self, *exc):
        if self.saved is None:
            sys.modules.pop("cupy", None)
        else:
            sys.modules["cupy"] = self.saved


# --------------------------------------------------------------------------------------------------------
# 4. speed
# --------------------------------------------------------------------------------------------------------
def large_model(run) -> dict:
    if not run.models.get("large"):
        raise FileNotFoundError("the large model is missing: the models part did not finish it")
    return run.models["large"]


def speed(run) -> None:
    s = run.settings["speed"]
    large = large_model(run)
    target, draft = llamaspec.Model(large["target"]), llamaspec.Model(large["draft"])
    batches = s["batches"]
    texts = prompts(max(batches))
    kw = dict(max_tokens=s["tokens"], ignore_eos=True)
    common = dict(n_ctx=1024, n_threads=run.threads)
    plain = llamaspec.Generator(target, spec_type="none", reuse_prefix=False, **common)
    spec = llamaspec.Generator(target, draft, spec_type="draft-simple", n_max=s["n_max"], reuse_prefix=False,
                               **common)
    # every run decodes its prompts in full, as the Generators above do
    batch_plain = {b: llamaspec.Batch(target, spec_type="none", n_seq=b, reuse_prefix=False, **common)
                   for b in batches}
    batch_spec = {b: llamaspec.Batch(target, draft, spec_type="draft-simple", n_seq=b, n_max=s["n_max"],
                                     reuse_prefix=False, **common) for b in batches}
    data = {"model": large["shape_name"], "tokens": s["tokens"], "n_max": s["n_max"], "batches": batches,
            "devices": target.devices, "repeats": 0, "runs": {}}
    for engine in (plain, spec):  # warm-up: the first generation of an engine allocates its graphs
        engine.generate(texts[0], max_tokens=8, ignore_eos=True)
    for engine in [*batch_plain.values(), *batch_spec.values()]:
        engine.generate(texts[:1], max_tokens=8, ignore_eos=True)
    reference: list = []
    n_max = s["n_max"]

    def sequential():  # plain decoding, one sequence at a time: the reference tokens and the "sequential" rows
        solo = [timed(lambda p=p: plain.generate(p, **kw)) for p in texts]
        reference[:] = reference or [r[1][0] for r in solo]
        record(data, "plain, 1 sequence", solo[0], reference[:1])
        for b in batches:
            if b > 1:
                record(data, f"plain, {b} sequences one after another",
                       (sum(r[0] for r in solo[:b]), [r[1][0] for r in solo[:b]], [r[2][0] for r in solo[:b]]),
                       reference[:b])

    steps = [sequential, lambda: record(data, f"draft-simple n_max {n_max}, 1 sequence",
                                        timed(lambda: spec.generate(texts[0], **kw)), reference[:1])]
    for b in batches:
        steps.append(lambda b=b: record(data, f"Batch plain, B = {b}",
                                        timed(lambda: batch_plain[b].generate(texts[:b], **kw)), reference[:b]))
        steps.append(lambda b=b: record(data, f"Batch draft-simple n_max {n_max}, B = {b}",
                                        timed(lambda: batch_spec[b].generate(texts[:b], **kw)), reference[:b]))
    pacer = Pacer(run)
    for repeat in range(s["repeats"]):
        # the first repeat runs whole (a row per step, saved as it comes); later ones while they fit
        if repeat and not pacer.fits():
            break
        t_repeat = time.perf_counter()
        for step in steps:
            step()
            summarize(data)
            run.save(data)
        data["repeats"] = repeat + 1
        pacer.slowest = max(pacer.slowest, time.perf_counter() - t_repeat)
        run.save(data)
    for engine in [plain, spec, *batch_plain.values(), *batch_spec.values()]:
        engine.close()


def timed(call) -> tuple:
    """(seconds, token lists, results) of a call that returns one GenerationResult or a list of them."""
    t0 = time.perf_counter()
    results = call()
    seconds = time.perf_counter() - t0
    results = results if isinstance(results, list) else [results]
    return seconds, [list(r.tokens) for r in results], results


def record(data: dict, key: str, measured: tuple, reference: list) -> None:
    seconds, tokens, results = measured
    row = data["runs"].setdefault(key, {"tok_s": [], "equal_plain": [0, 0], "drafted": 0, "accepted": 0})
    row["tok_s"].append(sum(len(t) for t in tokens) / seconds)
    row["equal_plain"][0] += sum(a == b for a, b in zip(tokens, reference))
    row["equal_plain"][1] += len(tokens)
    row["drafted"] += int(sum(r.stats.n_drafted for r in results))
    row["accepted"] += int(sum(r.stats.n_accepted for r in results))


def summarize(data: dict) -> None:
    """Medians, acceptance and the ratios of the rows measured so far."""
    for row in data["runs"].values():
        row["median_tok_s"] = statistics.median(row["tok_s"])
        row["acceptance"] = row["accepted"] / row["drafted"] if row["drafted"] else None
    med = {k: v["median_tok_s"] for k, v in data["runs"].items()}
    n_max = data["n_max"]
    pairs = {"draft-simple / plain, 1 sequence": (f"draft-simple n_max {n_max}, 1 sequence", "plain, 1 sequence")}
    for b in data["batches"]:
        sequential = "plain, 1 sequence" if b == 1 else f"plain, {b} sequences one after another"
        pairs[f"Batch plain / one after another, B = {b}"] = (f"Batch plain, B = {b}", sequential)
        pairs[f"Batch draft-simple / Batch plain, B = {b}"] = (f"Batch draft-simple n_max {n_max}, B = {b}",
                                                               f"Batch plain, B = {b}")
    data["ratios"] = {name: med[a] / med[b] for name, (a, b) in pairs.items() if a in med and b in med}


PARTS = {"lossless": lossless, "cost": cost, "cupy": cupy_arrays, "speed": speed}
