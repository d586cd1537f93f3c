"""evaluate(): compare drafters on a prompt set the way drafter papers and model cards do.

    >>> report = llamaspec.evaluate("target.gguf", {"dspark-8": {"draft": "head.gguf", "n_max": 8},
    ...                                             "ngram": "ngram-mod"}, repeats=3)
    >>> report.positions          # tidy DataFrame: task x drafter x position (P_i, a_i, per-step rate)
    >>> report.tasks              # task x drafter: tau, acceptance, loop rate, speed-up vs none (median, spread)
    >>> print(report.to_markdown())

Every metric comes from SpecStats (one definition each, stats.py), summed over a task's runs before
any ratio is taken. Speed is measured interleaved: for every prompt and repeat, each drafter and the
plain target run one after the other, so machine noise hits them alike; speed-ups are medians of the
per-run ratios with their min-max. pandas is imported only when a DataFrame is asked for.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from .generator import Generator
from .model import ModelLike, load_model
from .stats import SpecStats

BASELINE = "none"


def builtin_prompts() -> list:
    """The 13-category suite (code, JSON, Q&A, translation, long reasoning...), as [{"name", "prompt"}]."""
    return json.loads((Path(__file__).with_name("prompts.json")).read_text())["tasks"]


def load_prompts(prompts) -> list:
    """None: the built-in suite; a .jsonl path (one {"name", "prompt"} or {"prompt"} per line); a list of
    str or dicts."""
    if prompts is None:
        return builtin_prompts()
    if isinstance(prompts, (str, os.PathLike)) and str(prompts).endswith(".jsonl"):
        rows = [json.loads(line) for line in Path(prompts).read_text().splitlines() if line.strip()]
        prompts = rows
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            out.append({"name": f"prompt_{i}", "prompt": p})
        elif isinstance(p, Mapping) and isinstance(p.get("prompt"), str):
            out.append({"name": str(p.get("name", f"prompt_{i}")), "prompt": p["prompt"]})
        else:
            raise TypeError("prompts must be str or {'name', 'prompt'} dicts")
    if not out:
        raise ValueError("no prompts")
    return out


def loop_length(tokens: Sequence[int], max_period: int = 64, min_repeats: int = 3) -> int:
    """Tokens at the end of ``tokens`` covered by a cycle repeated at least ``min_repeats`` times (0: none).

    A greedy generation that falls into a loop ends in the same short token cycle over and over; the
    loop rate of a drafter/target pair is the share of generations whose tail is such a cycle.
    """
    n = len(tokens)
    best = 0
    for period in range(1, min(max_period, n // min_repeats) + 1):
        length = period
        while length < n and tokens[n - 1 - length] == tokens[n - 1 - length + period]:
            length += 1
        if length >= period * min_repeats:
            best = max(best, length)
    return best


def headless_pyplot():
    """matplotlib.pyplot on the file-only Agg backend (for scripts writing PNGs), or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties counted half); NaN with one class only."""
    pos, neg = scores[labels], scores[~labels]
    if pos.size == 0 or neg.size == 0:
        return float("nan")
    order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
    ranks = np.empty(order.size)
    values = np.concatenate([pos, neg])[order]
    i = 0
    while i < values.size:  # average ranks over ties
        j = i
        while j + 1 < values.size and values[j + 1] == values[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[:pos.size].sum() - pos.size * (pos.size + 1) / 2) / (pos.size * neg.size))


def calibration(confidence: np.ndarray, accepted: np.ndarray, n_bins: int = 10) -> dict:
    """ECE over equal-width confidence bins, the reliability diagram's points, and the AUC."""
    bins = np.minimum((confidence * n_bins).astype(int), n_bins - 1)
    ece, diagram = 0.0, []
    for b in range(n_bins):
        sel = bins == b
        if sel.any():
            conf, acc = float(confidence[sel].mean()), float(accepted[sel].mean())
            ece += sel.mean() * abs(conf - acc)
            diagram.append({"bin": b, "confidence": conf, "accepted": acc, "count": int(sel.sum())})
    return {"auc": auc(confidence, accepted), "ece": float(ece), "n": int(confidence.size), "diagram": diagram}


def verified_tokens(stats: SpecStats):
    """Per draft token the target judged: (position 1.., confidence, accepted?) from a generation's stats.

    Acceptance is a prefix: a round's draft tokens past its first rejection are never compared with the
    target, so they are left out. A confidence is thus scored against P(accepted | the positions before it
    were): what a DSpark confidence head estimates (llamaspec.train.calibrate), what the scheduler's online
    calibration counts (src/scheduler.cpp) and the denominator of ``SpecStats.conditional_acceptance``.
    """
    positions, confidences, accepted = [], [], []
    for r, conf in enumerate(stats.round_confidence):
        for j in range(min(int(stats.drafted[r]), int(stats.accepted[r]) + 1)):
            positions.append(j + 1)
            confidences.append(conf[j] if j < len(conf) else np.nan)
            accepted.append(j < stats.accepted[r])
    return np.array(positions, dtype=int), np.array(confidences, dtype=float), np.array(accepted, dtype=bool)


@dataclass
class Run:
    task: str
    drafter: str
    repeat: int
    tokens: list
    stop_reason: str
    stats: SpecStats


@dataclass
class Report:
    """What evaluate() measured: every run, and tables derived from them (see the module docstring)."""

    runs: list
    config: dict = field(default_factory=dict)

    # --- derived records (plain dicts; DataFrames below) ---------------------------------------------
    def _groups(self):
        """(task, drafter, runs) in the order the tasks ran, drafters sorted."""
        groups = {}
        for r in self.runs:
            groups.setdefault(r.task, {}).setdefault(r.drafter, []).append(r)
        for task, by_drafter in groups.items():
            for drafter in sorted(by_drafter):
                yield task, drafter, by_drafter[drafter]

    def position_records(self) -> list:
        rows = []
        for task, drafter, runs in self._groups():
            if drafter == BASELINE:
                continue
            s = SpecStats.combine([r.stats for r in runs])
            cal = self._calibration(runs)
            for i in range(s.n_max):
                c = cal.get(i + 1, {})
                rows.append({"task": task, "drafter": drafter, "position": i + 1,
                             "drafted": int(s.drafted_at[i]), "accepted": int(s.accepted_at[i]),
                             "P": _f(s.positional_acceptance[i]), "a": _f(s.conditional_acceptance[i]),
                             "per_step": _f(s.acceptance_per_step[i]),
                             "auc": _f(c.get("auc")), "ece": _f(c.get("ece"))})
        return rows

    @staticmethod
    def _calibration(runs) -> dict:
        parts = [verified_tokens(r.stats) for r in runs]
        pos = np.concatenate([p[0] for p in parts]) if parts else np.array([], int)
        conf = np.concatenate([p[1] for p in parts]) if parts else np.array([])
        acc = np.concatenate([p[2] for p in parts]) if parts else np.array([], bool)
        out = {}
        if conf.size == 0 or np.isnan(conf).all():
            return out
        for p in np.unique(pos):
            sel = (pos == p) & ~np.isnan(conf)
            if sel.any():
                out[int(p)] = calibration(conf[sel], acc[sel])
        return out

    def calibration(self, drafter: str, task: Optional[str] = None) -> dict:
        """Per position: AUC, ECE and the reliability diagram of the drafter's confidences (all tasks
        pooled unless ``task``). Empty for drafters without confidence (n-gram)."""
        runs = [r for r in self.runs if r.drafter == drafter and (task is None or r.task == task)]
        return self._calibration(runs)

    def speed_ratios(self, drafter: str, reference: str = BASELINE) -> dict:
        """task -> per-repeat tok/s of ``drafter`` over ``reference`` (both ran back to back on the same
        prompt in each repeat, so machine noise hits them alike). Summarise with median / min / max."""
        tok_s = {}
        for r in self.runs:
            if r.drafter in (drafter, reference):
                tok_s[(r.drafter, r.task, r.repeat)] = r.stats.tokens_per_second
        out = {}
        for (name, task, repeat), value in tok_s.items():
            ref = tok_s.get((reference, task, repeat), 0.0)
            if name == drafter and ref > 0:
                out.setdefault(task, []).append(value / ref)
        return out

    def task_records(self) -> list:
        rows = []
        ratios_of = {}
        for task, drafter, runs in self._groups():
            s = SpecStats.combine([r.stats for r in runs])
            loops = [loop_length(r.tokens) > 0 for r in runs]
            if drafter not in ratios_of:
                ratios_of[drafter] = self.speed_ratios(drafter)
            ratios = ratios_of[drafter].get(task, [])
            rows.append({
                "task": task, "drafter": drafter, "runs": len(runs), "generated": s.n_generated,
                "rounds": s.rounds, "drafted": s.n_drafted, "accepted": s.n_accepted,
                "acceptance": _f(s.acceptance_rate), "tau": _f(s.mean_accepted_length),
                "tok_s": statistics.median(r.stats.tokens_per_second for r in runs),
                "speedup": statistics.median(ratios) if ratios else math.nan,
                "speedup_min": min(ratios) if ratios else math.nan,
                "speedup_max": max(ratios) if ratios else math.nan,
                "repeats_for_5pct": repeats_needed(ratios, 0.05),
                "loop_rate": float(np.mean(loops)),
                "success_rate": float(np.mean([(not lp) and r.stop_reason in ("eos", "max_tokens", "stop")
                                               for lp, r in zip(loops, runs)])),
            })
        return rows

    # --- pandas --------------------------------------------------------------------------------------
    @property
    def positions(self):
        """Tidy DataFrame: task, drafter, position, drafted, accepted, P, a, per_step, auc, ece."""
        import pandas as pd

        return pd.DataFrame(self.position_records())

    @property
    def tasks(self):
        """DataFrame: one row per task x drafter (acceptance, tau, tok/s, speed-up vs none, loop rate...)."""
        import pandas as pd

        return pd.DataFrame(self.task_records())

    # --- serialisation ------------------------------------------------------------------------------
    def to_json(self) -> str:
        def stats_dict(s: SpecStats) -> dict:
            return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in
                    dict(n_max=s.n_max, spec_type=s.spec_type, drafted=s.drafted, accepted=s.accepted,
                         emitted=s.emitted, draft_seconds=s.draft_seconds, verify_seconds=s.verify_seconds,
                         prefill_seconds=s.prefill_seconds, prefill_tokens=s.prefill_tokens, proposed=s.proposed,
                         confidence=np.where(np.isnan(s.confidence), None, s.confidence)).items()}
        return json.dumps({"config": self.config,
                           "runs": [{"task": r.task, "drafter": r.drafter, "repeat": r.repeat, "tokens": r.tokens,
                                     "stop_reason": r.stop_reason, "stats": stats_dict(r.stats)} for r in self.runs]})

    @classmethod
    def from_json(cls, text: str) -> "Report":
        data = json.loads(text)
        runs = []
        for r in data["runs"]:
            s = dict(r["stats"])
            conf = np.array([np.nan if c is None else c for c in s.pop("confidence")], dtype=np.float32)
            arrays = {k: np.asarray(s[k], dtype=np.int32 if k in ("drafted", "accepted", "emitted", "proposed")
                                    else np.float64) for k in ("drafted", "accepted", "emitted", "proposed",
                                                                "draft_seconds", "verify_seconds")}
            stats = SpecStats(n_max=s["n_max"], spec_type=s["spec_type"], prefill_seconds=s["prefill_seconds"],
                              prefill_tokens=s["prefill_tokens"], confidence=conf, **arrays)
            runs.append(Run(r["task"], r["drafter"], r["repeat"], r["tokens"], r["stop_reason"], stats))
        return cls(runs=runs, config=data.get("config", {}))

    def to_markdown(self) -> str:
        lines = ["| task | drafter | tau | acceptance | speed-up vs none (min-max) | loop rate |", "|---|---|---|---|---|---|"]
        for t in self.task_records():
            if t["drafter"] == BASELINE:
                continue
            lines.append(f"| {t['task']} | {t['drafter']} | {_fmt(t['tau'])} | {_fmt(t['acceptance'], '.3f')} | "
                         f"{_fmt(t['speedup'])} ({_fmt(t['speedup_min'])}-{_fmt(t['speedup_max'])}) | "
                         f"{_fmt(t['loop_rate'])} |")
        lines += ["", "| drafter | task | " + " | ".join(f"P{i}" for i in range(1, self._n_max() + 1)) + " |",
                  "|---|---|" + "---|" * self._n_max()]
        by_key = {}
        for p in self.position_records():
            by_key.setdefault((p["drafter"], p["task"]), []).append(p["P"])
        for (drafter, task), ps in by_key.items():
            lines.append(f"| {drafter} | {task} | " + " | ".join("-" if p is None or math.isnan(p) else f"{p:.2f}"
                                                                for p in ps) + " |")
        return "\n".join(lines)

    # --- plots (matplotlib, imported only here) -------------------------------------------------------
    def plot_acceptance(self, drafter: Optional[str] = None, conditional: bool = False, ax=None):
        """P_i (or a_i) against position, one line per task (the acceptance-decay knee), for one drafter or all."""
        import matplotlib.pyplot as plt

        ax = ax or plt.subplots(figsize=(6, 4))[1]
        key = "a" if conditional else "P"
        by_line = {}
        for p in self.position_records():
            if drafter is None or p["drafter"] == drafter:
                by_line.setdefault(f"{p['drafter']} / {p['task']}", []).append((p["position"], p[key]))
        for label, points in by_line.items():
            xs, ys = zip(*[(x, np.nan if y is None else y) for x, y in points])
            ax.plot(xs, ys, marker="o", label=label)
        ax.set_xticks(range(1, self._n_max() + 1))
        ax.set_xlabel("draft position i")
        ax.set_ylabel("a_i = P(i accepted | i-1 accepted)" if conditional else "P_i = accepted_i / drafted_i")
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize="x-small")
        return ax

    def plot_calibration(self, drafter: str, ax=None):
        """Reliability diagram of the drafter's confidences, one line per position."""
        import matplotlib.pyplot as plt

        ax = ax or plt.subplots(figsize=(5, 5))[1]
        plot_reliability(ax, {f"position {p}": cal for p, cal in sorted(self.calibration(drafter).items())})
        return ax

    def plot_depth(self, drafter: str, ax=None):
        """Histogram of the verified depth per round (the confidence schedule's choices; 0 = skipped)."""
        import matplotlib.pyplot as plt

        ax = ax or plt.subplots(figsize=(5, 3))[1]
        depths = np.concatenate([r.stats.chosen_depth for r in self.runs if r.drafter == drafter] or [np.array([])])
        ax.hist(depths, bins=np.arange(self._n_max() + 2) - 0.5, rwidth=0.8)
        ax.set_xlabel("draft tokens verified in the round")
        ax.set_ylabel("rounds")
        return ax

    def plot_speedup(self, ax=None):
        """Speed-up vs plain decoding per task and drafter: median with min-max error bars."""
        import matplotlib.pyplot as plt

        rows = [t for t in self.task_records() if t["drafter"] != BASELINE and not math.isnan(t["speedup"])]
        ax = ax or plt.subplots(figsize=(7, 4))[1]
        drafters = sorted({t["drafter"] for t in rows})
        tasks = list(dict.fromkeys(t["task"] for t in rows))
        width = 0.8 / max(1, len(drafters))
        for k, d in enumerate(drafters):
            sel = {t["task"]: t for t in rows if t["drafter"] == d}
            xs = [i + k * width for i, task in enumerate(tasks) if task in sel]
            med = [sel[task]["speedup"] for task in tasks if task in sel]
            err = [[sel[task]["speedup"] - sel[task]["speedup_min"] for task in tasks if task in sel],
                   [sel[task]["speedup_max"] - sel[task]["speedup"] for task in tasks if task in sel]]
            ax.bar(xs, med, width, yerr=err, capsize=2, label=d)
        ax.axhline(1.0, color="grey", linewidth=1)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(tasks))], tasks, rotation=45, ha="right")
        ax.set_ylabel("tok/s vs plain decoding")
        ax.legend(fontsize="x-small")
        return ax

    def _n_max(self) -> int:
        return max((r.stats.n_max for r in self.runs if r.drafter != BASELINE), default=0)

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{t['task']}</td><td>{t['drafter']}</td><td>{_fmt(t['tau'])}</td>"
                       f"<td>{_fmt(t['acceptance'], '.3f')}</td><td>{_fmt(t['speedup'])}</td></tr>"
                       for t in self.task_records() if t["drafter"] != BASELINE)
        return ("<table><tr><th>task</th><th>drafter</th><th>tau</th><th>acceptance</th>"
                f"<th>speed-up vs none</th></tr>{rows}</table>")

    def __repr__(self) -> str:
        drafters = sorted({r.drafter for r in self.runs})
        tasks = len({r.task for r in self.runs})
        return f"Report({len(self.runs)} runs, {tasks} tasks, drafters={drafters})"


def plot_reliability(ax, lines: Mapping[str, dict]) -> None:
    """Reliability diagram on ``ax``: the diagonal, then one line per label from a calibration() dict
    (its "diagram" points, AUC and ECE in the legend)."""
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1)
    for label, cal in lines.items():
        pts = cal["diagram"]
        ax.plot([d["confidence"] for d in pts], [d["accepted"] for d in pts], marker="o",
                label=f"{label}: AUC {_fmt(cal['auc'], '.3f')}, ECE {_fmt(cal['ece'], '.3f')}")
    ax.set_xlabel("confidence")
    ax.set_ylabel("accepted fraction")
    ax.legend(fontsize="x-small")


def repeats_needed(ratios: Sequence[float], tolerance: float, z: float = 1.96) -> Optional[int]:
    """Repeats for a 95% confidence interval of the mean speed-up within +-tolerance (relative), from
    the spread of the ratios seen (None with fewer than two)."""
    if len(ratios) < 2:
        return None
    mean, sd = statistics.mean(ratios), statistics.stdev(ratios)
    return max(1, math.ceil((z * sd / (tolerance * mean)) ** 2)) if mean > 0 else None


def _fmt(x, spec: str = ".2f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _f(x) -> Optional[float]:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def evaluate(target: ModelLike, drafters: Mapping[str, Union[str, Mapping]], prompts=None, *, n_max: int = 8,
             max_tokens: int = 128, repeats: int = 1, temperature: float = 0.0, seed: int = 0,
             n_ctx: int = 2048, n_threads: Optional[int] = None, baseline: bool = True,
             progress: bool = True, warmup: bool = True) -> Report:
    """Run every drafter (and plain decoding, for speed) on every prompt, interleaved, ``repeats`` times.

    ``drafters``: name -> a spec_type string, or a dict of :class:`Generator` arguments
    (``draft``, ``spec_type``, ``n_max``, ``schedule``, ``ngram_size_n``...). ``prompts``: None (the
    built-in 13-category suite), a ``.jsonl`` path, or a list of str / {"name", "prompt"} dicts.

    Order: for each repeat and prompt, every drafter runs once, in the given order on even repeats and
    reversed on odd ones (A B C, C B A: a drift in machine speed does not favour whoever runs first).
    ``warmup``: each Generator first generates a few tokens, untimed (first decodes allocate buffers).
    """
    tasks = load_prompts(prompts)
    target = load_model(target)
    gens = {}
    specs = dict(drafters)
    if baseline and BASELINE not in specs:
        specs = {BASELINE: "none", **specs}
    for name, spec in specs.items():
        kwargs = {"spec_type": spec} if isinstance(spec, str) else dict(spec)
        kwargs.setdefault("n_max", n_max)
        gens[name] = Generator(target, kwargs.pop("draft", None), n_ctx=n_ctx, n_threads=n_threads,
                               reuse_prefix=False, **kwargs)
    steps = [(t, rep) for rep in range(repeats) for t in tasks]
    bar = _progress(len(steps) * len(gens), progress)
    runs = []
    try:
        if warmup and tasks:
            for gen in gens.values():
                gen.generate(tasks[0]["prompt"], 4, ignore_eos=True)
        for task, rep in steps:
            order = list(gens.items()) if rep % 2 == 0 else list(gens.items())[::-1]
            for name, gen in order:  # interleaved: every drafter on this prompt, one after the other
                result = gen.generate(task["prompt"], max_tokens, temperature=temperature, seed=seed + rep,
                                      ignore_eos=False)
                runs.append(Run(task["name"], name, rep, result.tokens, result.stop_reason, result.stats))
                bar.update(1)
    finally:
        bar.close()
        for gen in gens.values():
            gen.close()
    config = {"target": target.path, "drafters": {k: v if isinstance(v, str) else {a: str(b) for a, b in v.items()}
                                                  for k, v in specs.items()},
              "n_max": n_max, "max_tokens": max_tokens, "repeats": repeats, "temperature": temperature}
    return Report(runs=runs, config=config)


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc="evaluate", leave=False)
