"""Tests of the provided Transformer LM (cs336_systems/model.py, model_sizes.py): no points.

They pass before you write anything, and keep passing unless the provided files are changed:
the logits' shape, causality, RoPE, the attention swap used by §1.2, and the size table. What
needs the model's parameters or submodules runs next to it (executor/probes/provided_model.py).
"""

from __future__ import annotations

import pytest
import torch

from harness.assertions import assert_close
from executor.probes import run_probe
from tests.checks.model_spies import TINY_MODEL

SIZES = {  # the assignment's table: d_model, d_ff, num_layers, num_heads
    "small": (768, 3072, 12, 12),
    "medium": (1024, 4096, 24, 16),
    "large": (1280, 5120, 36, 20),
    "xl": (1600, 6400, 48, 25),
    "2.7B": (2560, 10240, 32, 32),
}
VOCAB = 10_000
TWO_LAYERS = {**TINY_MODEL, "num_layers": 2}


def tiny_model(adapters, seed=0, **kwargs):
    torch.manual_seed(seed)
    return adapters.get_transformer_lm(model_overrides=TWO_LAYERS, **kwargs)


class RecordingAttention:
    """Wraps an attention function; records its inputs."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[tuple[torch.Tensor, ...]] = []

    def __call__(self, Q, K, V, mask=None):
        self.calls.append((Q.detach(), K.detach(), V.detach(), mask))
        return self.inner(Q, K, V, mask)


def test_logits_shape_and_dtype(adapters):
    model = tiny_model(adapters)
    logits = model(torch.randint(0, VOCAB, (3, 10)))
    assert logits.shape == (3, 10, VOCAB) and logits.dtype == torch.float32, (
        f"expected float32 logits of shape (batch, seq, vocab) = (3, 10, {VOCAB}); got {logits.dtype} {tuple(logits.shape)}"
    )


def test_later_tokens_do_not_change_earlier_logits(adapters):
    model = tiny_model(adapters)
    tokens = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[:, 7] = (changed[:, 7] + 1) % VOCAB
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    assert_close(after[:, :7], before[:, :7], atol=1e-6, rtol=0, what="logits before position 7",
                 context="changing the token at position 7 must not change earlier logits (causal mask)")
    assert not torch.allclose(after[:, 7:], before[:, 7:]), "changing a token must change the logits from its position on"


def test_rope_rotates_queries_and_keys_by_position(adapters):
    recorder = RecordingAttention(adapters.get_scaled_dot_product_attention())
    model = tiny_model(adapters, attention_fn=recorder)
    with torch.no_grad():
        model(torch.full((1, 9), 42))  # one token repeated: before RoPE, every position's q (and k) is equal
    Q, K, _, _ = recorder.calls[0]  # first layer: (batch, heads, seq, d_head)
    assert not torch.allclose(Q[..., 1, :], Q[..., 0, :]), "queries at different positions must differ (RoPE)"
    assert_close(Q.norm(dim=-1), Q[..., :1, :].norm(dim=-1).expand_as(Q.norm(dim=-1)), atol=1e-5, rtol=1e-5,
                 what="query norms", context="RoPE is a rotation: it keeps every query's norm")
    scores = Q @ K.transpose(-1, -2)  # (batch, heads, seq, seq): q_m . k_n
    for offset in range(-3, 4):
        diagonal = torch.diagonal(scores, offset=offset, dim1=-2, dim2=-1)  # all (m, n) with n - m = offset
        assert_close(diagonal, diagonal[..., :1].expand_as(diagonal), atol=1e-4, rtol=1e-4,
                     what=f"q_m . k_n for n - m = {offset}",
                     context="with RoPE, the score of equal tokens depends only on their distance")


def test_attention_fn_gets_heads_and_a_causal_mask(adapters):
    recorder = RecordingAttention(adapters.get_scaled_dot_product_attention())
    model = tiny_model(adapters, attention_fn=recorder)
    model(torch.randint(0, VOCAB, (3, 5)))
    assert len(recorder.calls) == 2, f"each of the 2 layers calls attention once; got {len(recorder.calls)} calls"
    Q, K, V, mask = recorder.calls[0]
    heads, d_head = TWO_LAYERS["num_heads"], TWO_LAYERS["d_model"] // TWO_LAYERS["num_heads"]
    assert Q.shape == K.shape == V.shape == (3, heads, 5, d_head), f"got Q {tuple(Q.shape)}"
    assert mask.dtype == torch.bool and torch.equal(mask, torch.ones(5, 5, dtype=torch.bool).tril()), (
        f"mask must be the (seq, seq) bool causal mask (True where query i may see key j <= i); got {mask}"
    )


def test_use_attention_swaps_and_restores(adapters):
    # The model runs before, inside and after use_attention(recorder), the recorder counting its calls.
    seen = run_probe(adapters, "provided_model.use_attention", TWO_LAYERS, torch.randint(0, VOCAB, (2, 6)), 0)
    swapped, expected = seen["swapped"], seen["expected"]
    assert seen["recorder_calls"] == 2, (
        f"inside use_attention the 2 layers use the new attention (and after it, the old one); "
        f"got {seen['recorder_calls']} calls"
    )
    assert_close(seen["after"], expected, atol=0, rtol=0, what="logits after use_attention", context="attention restored")
    assert_close(swapped, expected, atol=0, rtol=0, what="logits", context="use_attention with an equal attention")


def test_inputs_longer_than_the_context_length_are_refused(adapters):
    model = tiny_model(adapters)
    with pytest.raises(ValueError, match="context_length"):
        model(torch.zeros(1, 1025, dtype=torch.long))


@pytest.mark.parametrize("name", list(SIZES))
def test_size_table(adapters, name):
    d_model, d_ff, num_layers, num_heads = SIZES[name]
    seen = run_probe(adapters, "provided_model.size", name)  # built on the meta device: no memory, no time
    per_layer = 4 * d_model * d_model + 3 * d_model * d_ff + 2 * d_model
    expected = 2 * VOCAB * d_model + num_layers * per_layer + d_model
    count = seen["parameters"]
    assert count == expected, (
        f"{name}: expected {expected:,} parameters (d_model={d_model}, d_ff={d_ff}, {num_layers} layers, "
        f"vocab {VOCAB}, untied embeddings); got {count:,}"
    )
    assert seen["num_heads"] == num_heads, f"{name}: expected {num_heads} heads; got {seen['num_heads']}"


def test_a_few_adamw_steps_lower_the_loss(adapters):
    tokens = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(0))
    losses = run_probe(adapters, "provided_model.adamw_losses", TWO_LAYERS, tokens, 0, 10, 1e-2)
    assert losses[-1] < losses[0] - 1.0, f"training on one batch must lower the loss; losses {losses}"
