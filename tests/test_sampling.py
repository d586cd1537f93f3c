"""Sampling: the fused truncation sampler equals llama.cpp's chain, and speculative sampling is lossless."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy.stats import chi2_contingency

import llamaspec
from llamaspec import _core

# (temperature, top_k, top_p, min_p): llama.cpp's defaults, each stage alone, and mixtures
SAMPLER_PARAMS = [
    (0.8, 40, 0.95, 0.05),
    (1.0, 0, 1.0, 0.0),
    (0.7, 0, 0.9, 0.0),
    (1.3, 0, 1.0, 0.1),
    (0.5, 10, 1.0, 0.0),
    (1.0, 0, 0.5, 0.0),
    (0.9, 0, 0.95, 0.05),
    (1.0, 200, 0.8, 0.0),
    (2.0, 1, 1.0, 0.0),
]


@pytest.mark.parametrize("n_vocab", [384, 32000])
@pytest.mark.parametrize("params", SAMPLER_PARAMS)
def test_fused_sampler_matches_llama_chain(n_vocab, params):
    rng = np.random.default_rng(n_vocab)
    logits = (rng.standard_normal((12, n_vocab)) * rng.uniform(0.5, 6.0, (12, 1))).astype(np.float32)
    logits[0, :5] = -np.inf  # masked tokens (ignore_eos) are never kept
    fused = _core.fused_truncate(logits, *params)
    chain = _core.llama_chain_truncate(logits, *params)
    for (ids_f, probs_f), (ids_c, probs_c) in zip(fused, chain):
        got, want = dict(zip(ids_f, probs_f)), dict(zip(ids_c, probs_c))
        assert set(got) == set(want)  # identical truncated support
        assert max(abs(got[t] - want[t]) for t in want) <= 1e-6
        assert sum(probs_f) == pytest.approx(1.0, abs=1e-5)


def test_invalid_sampler_parameters(target_model):
    with llamaspec.Generator(target_model, n_ctx=256) as gen:
        for bad in (dict(top_p=0.0), dict(top_p=1.5), dict(min_p=-0.1), dict(top_k=-1),
                    dict(temperature=float("nan")), dict(seed=-1)):
            with pytest.raises(ValueError):
                gen.generate("hello", 4, **{"temperature": 1.0, **bad})


def test_seeded_sampling_is_repeatable(models, target_model):
    with llamaspec.Generator(target_model, models["draft_simple"], n_max=4, n_ctx=256) as gen:
        runs = [gen.generate("Once upon a time", 32, temperature=1.0, seed=s, ignore_eos=True).tokens
                for s in (7, 7, 8)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


N_SAMPLES = 2000
PROMPT = "the cat sat on the"
N_TOKENS = 3


def sample_prefixes(gen, n, seed0, **sampling):
    return [tuple(gen.generate(PROMPT, N_TOKENS, seed=seed0 + i, ignore_eos=True, **sampling).tokens)
            for i in range(n)]


def two_sample_chi2(a, b, min_expected=5.0):
    """Chi-square homogeneity test of two samples of categories; rare categories are pooled."""
    ca, cb = Counter(a), Counter(b)
    total = len(a) + len(b)
    frequent = [k for k in set(ca) | set(cb) if (ca[k] + cb[k]) * min(len(a), len(b)) / total >= min_expected]
    table = np.array([[ca[k] for k in frequent] + [len(a) - sum(ca[k] for k in frequent)],
                      [cb[k] for k in frequent] + [len(b) - sum(cb[k] for k in frequent)]])
    table = table[:, table.sum(axis=0) > 0]
    stat, p_value, dof, _ = chi2_contingency(table)
    return stat, p_value, dof


@pytest.fixture(scope="module")
def plain_samples(target_model):
    with llamaspec.Generator(target_model, spec_type="none", n_ctx=256) as gen:
        return {name: sample_prefixes(gen, N_SAMPLES, 10**6, **params) for name, params in SAMPLINGS.items()}


SAMPLINGS = {
    "temperature 1, no truncation": dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    "llama.cpp defaults at 0.8": dict(temperature=0.8),
}
P_THRESHOLD = 1e-3  # each test; fixed seeds make the outcome deterministic


def distribution_tests(spec, plain):
    """p-values for the joint of the first two tokens and for the third token's marginal."""
    return [two_sample_chi2([s[:2] for s in spec], [s[:2] for s in plain]),
            two_sample_chi2([s[2] for s in spec], [s[2] for s in plain])]


@pytest.mark.parametrize("name", list(SAMPLINGS))
@pytest.mark.parametrize("draft,spec_type,n_max", [("draft_simple", "draft-simple", 3), ("dspark", "draft-dspark", 3)])
def test_speculative_sampling_matches_target(models, target_model, plain_samples, name, draft, spec_type, n_max):
    with llamaspec.Generator(target_model, models[draft], n_max=n_max, spec_type=spec_type, n_ctx=256) as gen:
        spec = sample_prefixes(gen, N_SAMPLES, 0, **SAMPLINGS[name])
        drafted = gen.last_stats.n_drafted
    assert drafted > 0
    for stat, p_value, dof in distribution_tests(spec, plain_samples[name]):
        print(f"{spec_type} {name}: chi2 {stat:.1f}, dof {dof}, p {p_value:.3g} (N={N_SAMPLES} each)")
        assert p_value > P_THRESHOLD


@pytest.mark.parametrize("name", list(SAMPLINGS))
def test_scheduled_sampling_matches_target(models, target_model, plain_samples, name):
    """Under the confidence schedule, which verifies fewer tokens than drafted when the confidence is
    low, the output still follows the target's distribution. Drafting is forced on and the target
    costs are given (each verified token costs 0.1 of a pass), so every sample goes through a draft
    and its truncation, the same way whatever the machine's load."""
    with llamaspec.Generator(target_model, models["draft_simple"], n_max=3, n_ctx=256,
                             schedule="confidence") as gen:
        gen._engine._set_debug_schedule(True, [1.0, 1.1, 1.2, 1.3])
        spec, drafted, cut = [], 0, 0
        for i in range(N_SAMPLES):
            result = gen.generate(PROMPT, N_TOKENS, seed=i, ignore_eos=True, **SAMPLINGS[name])
            spec.append(tuple(result.tokens))
            drafted += result.stats.n_drafted
            cut += int((result.stats.proposed - result.stats.drafted).sum())
    print(f"scheduled {name}: {drafted} tokens verified, {cut} drafted but cut")
    assert drafted > N_SAMPLES // 4 and cut > 0  # many drafts verified, and the schedule really cut some
    for stat, p_value, dof in distribution_tests(spec, plain_samples[name]):
        print(f"scheduled draft-simple {name}: chi2 {stat:.1f}, dof {dof}, p {p_value:.3g} (N={N_SAMPLES} each)")
        assert p_value > P_THRESHOLD


def test_broken_acceptance_is_detected(models, target_model, plain_samples):
    """The same test has power: accepting every draft unverified is caught."""
    name = "temperature 1, no truncation"
    with llamaspec.Generator(target_model, models["draft_simple"], n_max=3, n_ctx=256) as gen:
        gen._engine._set_debug_accept_all(True)
        broken = sample_prefixes(gen, N_SAMPLES, 0, **SAMPLINGS[name])
    p_values = [p for _, p, _ in distribution_tests(broken, plain_samples[name])]
    print(f"accept-all: p-values {p_values}")
    assert min(p_values) < 1e-6


def test_greedy_token_is_the_first_argmax():
    """The vectorised argmax the engine verifies with: np.argmax's answer (first index of the maximum),
    with ties across and within SIMD lanes, maxima in the tail, and every length around the lane width."""
    import llamaspec

    greedy = llamaspec.Sampler(temperature=0)
    rng = np.random.default_rng(0)
    for n in list(range(1, 40)) + [262144, 151936 + 7]:
        for _ in range(3):
            row = rng.integers(-3, 4, size=n).astype(np.float32)  # many ties
            assert greedy.sample(row) == int(np.argmax(row)), n
        row = rng.normal(size=n).astype(np.float32)
        row[-1] = 100.0  # the maximum in the tail
        assert greedy.sample(row) == n - 1
        row[n // 2] = 100.0  # a tie: the first one wins
        assert greedy.sample(row) == min(n // 2, n - 1)
    row = np.full(64, -np.inf, dtype=np.float32)
    row[40] = -1e30
    assert greedy.sample(row) == 40
    # NaN never wins (np.argmax would pick it); nothing above -inf: 0
    for n in (7, 40, 262144):
        row = rng.normal(size=n).astype(np.float32)
        row[0] = row[n // 3] = np.nan
        row[-2] = 50.0
        assert greedy.sample(row) == n - 2
        assert greedy.sample(np.full(n, np.nan, dtype=np.float32)) == 0
        row = np.full(n, -np.inf, dtype=np.float32)
        row[1] = np.nan
        assert greedy.sample(row) == 0
