"""The confidence head's quality and its calibration, measured on held-out self-distilled data.

Teacher-forced, slot i's confidence estimates P(slot i's draft is accepted | slots 0..i-1 were): the
Markov head's previous token is then the true one, exactly the situation the confidence head sees
when llama.cpp asks it during a round. Calibration is Platt scaling of the confidence logit,
sigmoid(a z + c), fitted by maximum likelihood on held-out rounds and folded into ``conf_proj``
(weight a w, bias a b + c), so the GGUF needs nothing new.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..evaluate import calibration, headless_pyplot, plot_reliability
from .dspark import DSparkHead
from .trainer import DistilledData, losses


@torch.no_grad()
def collect(head: DSparkHead, data: DistilledData, n_rounds: int = 2048, batch_size: int = 32,
            seed: int = 1) -> dict:
    """Confidence logits z [N, k], hits [N, k] and valid [N, k] of ``n_rounds`` random rounds of ``data``."""
    head.eval()
    rng = np.random.default_rng(seed)
    zs, hits, valid = [], [], []
    for _ in range(max(1, n_rounds // batch_size)):
        out = losses(head, data.batch(rng, batch_size, head.c.block_size, head.c.mask_token_id))
        zs.append(torch.logit(out["conf"].double(), eps=1e-12))
        hits.append(out["hits"])
        valid.append(out["valid"])
    return {"z": torch.cat(zs).numpy(), "hits": torch.cat(hits).numpy(), "valid": torch.cat(valid).numpy()}


def report(z: np.ndarray, hits: np.ndarray, valid: np.ndarray, a: float = 1.0, c: float = 0.0) -> dict:
    """AUC, ECE and reliability diagram (llamaspec.evaluate.calibration, the definitions the suite's
    reports use), overall and per slot, of the confidences sigmoid(a z + c)."""
    probs = 1.0 / (1.0 + np.exp(-(a * z + c)))
    hits = hits.astype(bool)
    out = {"overall": {**calibration(probs[valid], hits[valid]), "acceptance": float(hits[valid].mean())},
           "per_slot": []}
    for i in range(z.shape[1]):
        v = valid[:, i]
        slot = calibration(probs[v, i], hits[v, i])
        out["per_slot"].append({"slot": i + 1, "auc": slot["auc"], "ece": slot["ece"], "n": slot["n"],
                                "acceptance": float(hits[v, i].mean()), "mean_confidence": float(probs[v, i].mean())})
    return out


def fit_platt(z: np.ndarray, hits: np.ndarray, valid: np.ndarray) -> tuple:
    """(a, c) maximising the likelihood of the hits under sigmoid(a z + c)."""
    zt = torch.tensor(z[valid], dtype=torch.float64)
    yt = torch.tensor(hits[valid], dtype=torch.float64)
    params = torch.tensor([1.0, 0.0], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([params], lr=0.5, max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(params[0] * zt + params[1], yt)
        loss.backward()
        return loss

    opt.step(closure)
    a, c = params.detach().tolist()
    return float(a), float(c)


@torch.no_grad()
def fold(head: DSparkHead, a: float, c: float) -> None:
    """Bake sigmoid(a z + c) into the confidence head: z = w.x + b becomes (a w).x + (a b + c)."""
    head.conf_proj.weight.mul_(a)
    head.conf_proj.bias.mul_(a).add_(c)


def calibrate(head: DSparkHead, heldout: DistilledData, n_rounds: int = 2048,
              plot_path: Optional[str] = None) -> dict:
    """Fit (a, c) on half of ``n_rounds`` held-out rounds, fold them into the head, and report AUC/ECE before
    and after on the other half (and a reliability diagram at ``plot_path`` when matplotlib is present)."""
    fit = collect(head, heldout, n_rounds, seed=1)
    test = collect(head, heldout, n_rounds, seed=2)
    a, c = fit_platt(fit["z"], fit["hits"], fit["valid"])
    before = report(test["z"], test["hits"], test["valid"])
    after = report(test["z"], test["hits"], test["valid"], a, c)
    fold(head, a, c)
    if plot_path:
        _plot(before, after, plot_path)
    return {"a": a, "c": c, "n_rounds": n_rounds, "before": before, "after": after}


def _plot(before: dict, after: dict, path: str) -> None:
    plt = headless_pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(5, 5))
    plot_reliability(ax, {"before calibration": before["overall"], "after calibration": after["overall"]})
    ax.set_title("DSpark confidence head, held-out rounds")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
