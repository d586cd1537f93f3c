"""The target architectures of the reference reports, with every llama.cpp drafter: lossless everywhere.

Targets: qwen3 (attention only), qwen35 (Gated DeltaNet recurrent + attention layers) and qwen35moe
(the same with routed + shared experts), written by tiny_models with MTP layers. A hybrid target
takes rejected draft tokens back through per-token recurrent snapshots of the verification batch
(or, forced here too, state checkpoints); a hybrid draft model through checkpoints. Drafts share
the target's first layers, so partial acceptance (the case that exercises rollback) is frequent.

MATRIX below is the single source of the documentation's architecture table (test_docs_table).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import llamaspec

MAX_TOKENS = 48
LONG_TOKENS = 160
N_CTX = 512
PROMPTS = [
    "the cat sat on the mat. the cat sat on the",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "one two three one two three one two three one two three",
]

TARGETS = {  # architecture -> (target file, hybrid draft, non-hybrid draft, EAGLE3 head)
    "qwen3": ("target", "qwen35_draft", "draft_simple", "eagle3_qwen3"),
    "qwen35": ("qwen35_target_mtp", "qwen35_draft", "draft_simple", "eagle3_qwen35"),
    "qwen35moe": ("qwen35moe_target_mtp", "qwen35moe_draft", "draft_simple", "eagle3_qwen35"),
}

# (label, spec_type, draft role): the table's rows
DRAFTERS = [
    ("draft-simple (hybrid draft)", "draft-simple", "hybrid_draft"),
    ("draft-simple (qwen3 draft)", "draft-simple", "plain_draft"),
    ("draft-dflash", "draft-dflash", "dflash"),
    ("draft-dspark", "draft-dspark", "dspark"),
    ("draft-eagle3", "draft-eagle3", "eagle3"),
    ("draft-mtp", "draft-mtp", None),
    ("ngram-simple", "ngram-simple", None),
    ("ngram-map-k", "ngram-map-k", None),
    ("ngram-map-k4v", "ngram-map-k4v", None),
    ("ngram-mod", "ngram-mod", None),
    ("ngram-cache", "ngram-cache", None),
    ("ngram-mod,draft-dspark (chain)", "ngram-mod,draft-dspark", "dspark"),
]

# what each target's context and each draft context use to take tokens back
EXPECTED_TARGET_ROLLBACK = {"qwen3": "remove", "qwen35": "snapshots", "qwen35moe": "snapshots"}


def applicable(arch: str, spec_type: str) -> bool:
    return not (spec_type == "draft-mtp" and arch == "qwen3")  # the qwen3 target carries no MTP layers


MATRIX = [(arch, label, spec_type, role) for arch in TARGETS for label, spec_type, role in DRAFTERS
          if applicable(arch, spec_type)]


def draft_path(paths: dict, arch: str, role) -> "str | None":
    if role is None:
        return None
    _, hybrid, plain, eagle3 = TARGETS[arch]
    return paths[{"hybrid_draft": hybrid, "plain_draft": plain, "eagle3": eagle3}.get(role, role)]


@pytest.fixture(scope="module")
def targets(hybrid_models):
    return {arch: llamaspec.Model(hybrid_models[files[0]]) for arch, files in TARGETS.items()}


@pytest.fixture(scope="module")
def references(targets):
    """Plain greedy decoding of each target alone."""
    out = {}
    for arch, model in targets.items():
        with llamaspec.Generator(model, spec_type="none", n_ctx=N_CTX, n_threads=1) as gen:
            out[arch] = {p: gen.generate(p, LONG_TOKENS, ignore_eos=True).tokens for p in PROMPTS}
    return out


def partial_rounds(stats) -> int:
    return int(((stats.accepted > 0) & (stats.accepted < stats.drafted)).sum())


@pytest.mark.parametrize("arch,label,spec_type,role", MATRIX, ids=[f"{m[0]}-{m[2]}-{m[3]}" for m in MATRIX])
def test_greedy_output_equals_plain_decoding(hybrid_models, targets, references, arch, label, spec_type, role):
    """Every n_max in {1, 4, 8} x schedule in {fixed, confidence}: token for token equal to the target alone."""
    drafted = accepted = partial = rejected = 0
    for n_max in (1, 4, 8):
        if spec_type == "draft-dflash" and n_max == 8:
            n_max = 7  # a DFlash head drafts block_size - 1 tokens
        for schedule in ("fixed", "confidence"):
            with llamaspec.Generator(targets[arch], draft_path(hybrid_models, arch, role), spec_type=spec_type,
                                     n_max=n_max, n_ctx=N_CTX, n_threads=1, schedule=schedule,
                                     ngram_size_n=2) as gen:
                assert gen.spec_type == spec_type
                for prompt in PROMPTS:
                    if schedule == "confidence":
                        gen._engine._set_debug_schedule(True)  # draft every round: the rollback path must run
                    # n-gram drafts need the output to repeat itself: longer generations
                    n_tokens = LONG_TOKENS if role is None and spec_type != "draft-mtp" else MAX_TOKENS
                    result = gen.generate(prompt, n_tokens, ignore_eos=True)
                    assert result.tokens == references[arch][prompt][:n_tokens], (arch, spec_type, n_max, schedule,
                                                                                 prompt)
                    stats = result.stats
                    drafted += stats.n_drafted
                    accepted += stats.n_accepted
                    partial += partial_rounds(stats)
                    rejected += int((stats.accepted < stats.drafted).sum())
                info = gen.memory_info
                assert info["target"]["rollback"] == EXPECTED_TARGET_ROLLBACK[arch]
                if role == "hybrid_draft":
                    assert info["draft"]["rollback"] == "checkpoint"
                    assert info["draft"]["checkpoints_saved"] > 0
    print(f"{arch} | {label} | drafted {drafted} | accepted {accepted} | partial rounds {partial} | "
          f"rounds with a rejection {rejected}")
    assert drafted > 0 and rejected > 0, "no draft was ever rejected: rollback untested"
    if spec_type != "draft-dflash":  # the random DFlash head accepts nothing; every other drafter partly agrees
        assert partial > 0, f"{label}: no round with a partial acceptance (drafted {drafted}, accepted {accepted})"


@pytest.mark.parametrize("arch", ["qwen35", "qwen35moe"])
@pytest.mark.parametrize("spec_type,role", [("draft-simple", "hybrid_draft"), ("ngram-mod", None),
                                            ("draft-mtp", None)])
def test_checkpoint_rollback_is_lossless(hybrid_models, targets, references, arch, spec_type, role):
    """rollback='checkpoint': restore the saved state and decode the accepted tokens again. (LONG_TOKENS: on the
    tiny hybrids ngram-mod's first rejected draft comes after 48 tokens.)"""
    with llamaspec.Generator(targets[arch], draft_path(hybrid_models, arch, role), spec_type=spec_type, n_max=4,
                             n_ctx=N_CTX, n_threads=1, rollback="checkpoint") as gen:
        for prompt in PROMPTS:
            assert gen.generate(prompt, LONG_TOKENS, ignore_eos=True).tokens == references[arch][prompt]
        info = gen.memory_info["target"]
    assert info["rollback"] == "checkpoint"
    assert info["checkpoints_saved"] > 0 and info["replay_tokens"] > 0


def test_plain_targets_keep_kv_removal(targets):
    with llamaspec.Generator(targets["qwen3"], spec_type="ngram-mod", n_ctx=N_CTX, rollback="checkpoint") as gen:
        assert gen.memory_info["target"]["rollback"] == "remove"  # nothing recurrent to checkpoint


def test_auto_picks_mtp_only_where_the_target_has_it(hybrid_models, targets):
    with llamaspec.Generator(targets["qwen35"], n_ctx=N_CTX) as gen:
        assert gen.spec_type == "draft-mtp"
    with llamaspec.Generator(hybrid_models["qwen35_target"], n_ctx=N_CTX) as gen:
        assert gen.spec_type == "none"
    with llamaspec.Generator(targets["qwen35"], hybrid_models["eagle3_qwen35"], n_ctx=N_CTX) as gen:
        assert gen.spec_type == "draft-eagle3"
    no_mtp = llamaspec.Model(hybrid_models["qwen35_target_mtp"], load_mtp=False)
    assert not no_mtp.has_mtp
    with llamaspec.Generator(no_mtp, n_ctx=N_CTX) as gen:
        assert gen.spec_type == "none"
    with pytest.raises(ValueError, match="load_mtp=True"):
        llamaspec.Generator(no_mtp, spec_type="draft-mtp", n_ctx=N_CTX)
    with pytest.raises(ValueError, match="has none"):
        llamaspec.Generator(targets["qwen3"], spec_type="draft-mtp", n_ctx=N_CTX)


def test_bad_chains_raise(hybrid_models, targets):
    with pytest.raises(ValueError, match="several model drafters"):
        llamaspec.Generator(targets["qwen35"], hybrid_models["dspark"], spec_type="draft-dspark,draft-mtp")
    with pytest.raises(ValueError, match="twice"):
        llamaspec.Generator(targets["qwen35"], spec_type="ngram-mod,ngram-mod")
    with pytest.raises(ValueError, match="unknown spec_type"):
        llamaspec.Generator(targets["qwen35"], spec_type="ngram-mod,")
    with pytest.raises(ValueError, match="none"):
        llamaspec.Generator(targets["qwen35"], spec_type="none,ngram-mod")


def test_heads_on_the_wrong_target_raise(hybrid_models, targets):
    with pytest.raises(ValueError, match="EAGLE3 head"):
        llamaspec.Generator(targets["qwen3"], hybrid_models["dspark"], spec_type="draft-eagle3")
    with pytest.raises(ValueError, match="DFlash/DSpark draft head"):
        llamaspec.Generator(targets["qwen35"], hybrid_models["eagle3_qwen35"], spec_type="draft-dspark")


def test_layer_features_missing_from_the_target_graph_raise(tmp_path, hybrid_models):
    """A head whose target architecture publishes no layer inputs fails with ValueError, not an abort:
    a tiny qwen2 (llama.cpp's qwen2 graph sets no t_layer_inp) with a head of its shape."""
    from llamaspec import testing as tiny_models

    qwen2 = tmp_path / "qwen2.gguf"
    tiny_models.write_target(qwen2, 0, arch="qwen2")
    assert llamaspec.inspect_gguf(str(qwen2))["architecture"] == "qwen2"
    with llamaspec.Generator(str(qwen2), spec_type="none", n_ctx=128) as plain:  # the model itself runs
        assert len(plain.generate("hello", 8, ignore_eos=True).tokens) == 8
    for spec_type, head in (("draft-dspark", hybrid_models["dspark"]), ("draft-dflash", hybrid_models["dflash"])):
        with pytest.raises(ValueError, match="does not publish"):
            llamaspec.Generator(str(qwen2), head, spec_type=spec_type, n_max=4, n_ctx=128)


def render_table() -> str:
    """The documentation's architecture x drafter table (docs/guide/drafters.md), from MATRIX."""
    archs = list(TARGETS)
    heads = [f"{a} (rollback: {EXPECTED_TARGET_ROLLBACK[a]})" for a in archs]
    lines = ["| drafter | " + " | ".join(heads) + " |", "|---|" + "---|" * len(archs)]
    for label, spec_type, _ in DRAFTERS:
        cells = ["lossless" if applicable(a, spec_type) else "n/a (no MTP layers)" for a in archs]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def test_docs_table():
    page = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "drafters.md").read_text()
    block = re.search(r"<!-- architecture-table -->\n(.*?)\n<!-- /architecture-table -->", page, re.S)
    assert block, "docs/guide/drafters.md lacks the architecture table markers"
    assert block.group(1).strip() == render_table(), "the table is out of date: print(render_table())"


def test_sampled_output_follows_the_hybrid_target(hybrid_models, targets):
    """Speculative sampling on a hybrid (qwen35) target with a hybrid draft: the distribution of the
    first three tokens equals plain sampling (chi-square, 2000 samples a side, as test_sampling)."""
    from test_sampling import N_SAMPLES, P_THRESHOLD, distribution_tests, sample_prefixes

    sampling = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    with llamaspec.Generator(targets["qwen35"], spec_type="none", n_ctx=256, n_threads=1) as gen:
        plain = sample_prefixes(gen, N_SAMPLES, 10**6, **sampling)
    with llamaspec.Generator(targets["qwen35"], hybrid_models["qwen35_draft"], spec_type="draft-simple", n_max=3,
                             n_ctx=256, n_threads=1) as gen:
        spec = sample_prefixes(gen, N_SAMPLES, 0, **sampling)
        assert gen.memory_info["draft"]["rollback"] == "checkpoint"
    for stat, p_value, dof in distribution_tests(spec, plain):
        print(f"qwen35 draft-simple sampled: chi2 {stat:.1f}, dof {dof}, p {p_value:.3g} (N={N_SAMPLES} each)")
        assert p_value > P_THRESHOLD
