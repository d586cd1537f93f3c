"""SpecStats definitions (one place for each metric) and aggregation."""

from __future__ import annotations

import numpy as np
import pytest

import llamaspec
from llamaspec import SpecStats


def make(drafted, accepted, n_max=4, spec_type="x"):
    drafted, accepted = np.array(drafted, dtype=np.int32), np.array(accepted, dtype=np.int32)
    emitted = accepted + 1
    zeros = np.zeros(drafted.size)
    return SpecStats(n_max=n_max, spec_type=spec_type, drafted=drafted, accepted=accepted, emitted=emitted,
                     draft_seconds=zeros, verify_seconds=zeros + 0.01)


def test_definitions_by_hand():
    s = make([4, 4, 2, 0], [4, 1, 2, 0])
    # P_i = accepted at i / drafted at i
    np.testing.assert_allclose(s.positional_acceptance, [3 / 3, 2 / 3, 1 / 2, 1 / 2])
    # a_i = accepted at i / (drafted at i and accepted through i-1)
    np.testing.assert_allclose(s.conditional_acceptance, [3 / 3, 2 / 3, 1 / 1, 1 / 1])
    # per verification step: accepted at i / rounds that drafted anything (3)
    np.testing.assert_allclose(s.acceptance_per_step, [3 / 3, 2 / 3, 1 / 3, 1 / 3])
    assert s.mean_accepted_length == pytest.approx((5 + 2 + 3 + 1) / 4)


def test_adding_stats_gives_the_union_not_an_average():
    a, b = make([4, 4], [4, 0]), make([2, 2, 2, 2], [2, 2, 2, 1])
    total = a + b
    assert total.rounds == 6 and total.n_drafted == 16 and total.n_accepted == 11
    # P1 of the union = 5 accepted / 6 drafted, not the mean of 1/2 and 4/4
    assert total.positional_acceptance[0] == pytest.approx(5 / 6)
    assert sum([a, b]).n_accepted == total.n_accepted == SpecStats.combine([a, b]).n_accepted
    assert total.acceptance_rate == pytest.approx(11 / 16)


def test_real_generations_add_up(target_model, models):
    with llamaspec.Generator(target_model, models["draft_simple"], n_max=4, n_ctx=256) as gen:
        parts = [gen.generate(p, 24, ignore_eos=True).stats for p in ("Hello world", "the cat sat")]
    total = SpecStats.combine(parts)
    assert total.n_generated == 48 and total.n_accepted == sum(p.n_accepted for p in parts)
    assert np.array_equal(total.accepted_at, parts[0].accepted_at + parts[1].accepted_at)


def test_stats_without_drafts_are_strict_json_and_print_no_nan():
    """A generation that drafted nothing (plain decoding, a schedule that skipped every round)."""
    import json

    s = make([0, 0, 0], [0, 0, 0])
    digest = json.loads(json.dumps(s.summary(), allow_nan=False))  # raises on NaN
    assert digest["acceptance_rate"] is None and digest["P"] == [None] * 4
    assert digest["mean_accepted_length"] == 1.0
    assert "nan" not in s.table().lower() and "nothing drafted" in s.table()
    assert make([2], [1]).summary()["acceptance_rate"] == 0.5


def test_cli_json_is_strict_json_for_plain_and_speculative_runs(models, tmp_path, capsys):
    """`python -m llamaspec --json` writes what any JSON parser reads, drafts or not."""
    import json

    from llamaspec.__main__ import main

    for spec_type, draft in (("none", None), ("draft-simple", models["draft_simple"])):
        out = tmp_path / f"{spec_type}.json"
        argv = ["-m", models["target"], "--spec-type", spec_type, "-n", "12", "--ignore-eos", "--n-ctx", "256",
                "--json", str(out)] + (["-md", draft] if draft else [])
        assert main(argv) == 0
        record = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in {spec_type} JSON"))
        assert record["generated"] == 12 and len(record["tokens"]) == 12
        assert (record["drafted"] == 0) == (spec_type == "none")
    assert "nan" not in capsys.readouterr().out.lower()
