"""The training recipe against the release, read off the built models (tiny random-weight
backbones on CPU): the decoder's LoRA scale, which weights train in each phase, the MLLM's loss
terms, gradient accumulation and the T5 call."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_inputs import GAME_TURN, tiny_config

import trainer  # noqa: F401  (makes torchvision importable before transformers)
from trainer.phases.loop import describe_trainable
from trainer.shared.config import EncoderConfig
from trainer.shared.tiny import TINY_CONFIGS, mistral_tokenizer

_TINY_DECODER = TINY_CONFIGS["cogvideox"]
_DECODER_WIDTH = _TINY_DECODER["num_attention_heads"] * _TINY_DECODER["attention_head_dim"]

# trainer.build (transformers, peft, diffusers: seconds) is imported in the tests that build a
# part, not at collection, which every test worker pays.

CPU = torch.device("cpu")


def _trainable(model: torch.nn.Module) -> dict[str, int]:
    return {n: p.numel() for n, p in model.named_parameters() if p.requires_grad}


# ---- 1. the decoder's LoRA scale ------------------------------------------------------------


def test_decoder_lora_scale_is_the_releases_one_over_rank(backbones, shards, tmp_path):
    from peft.tuners.lora import LoraLayer

    from trainer.models import build

    # the default rank (64) and alpha, on the tiny transformer
    config = tiny_config("encoder", backbones, shards, tmp_path, decoder_lora_rank=64)
    config.decoder_lora_alpha = EncoderConfig().decoder_lora_alpha
    decoder = build.shot_decoder(config, CPU, torch.float32)
    layers = [m for m in decoder.transformer.modules() if isinstance(m, LoraLayer)]
    assert len(layers) == 4 * 2  # to_q, to_k, to_v, to_out.0 in each of the 2 blocks
    assert {m.scaling["default"] for m in layers} == {1 / 64}
    # the scale acts: the update B A x is multiplied by 1/64 in the layer's output
    layer = layers[0]
    with torch.no_grad():
        layer.lora_B["default"].weight.normal_()
        x = torch.randn(3, layer.in_features)
        update = layer.lora_B["default"](layer.lora_A["default"](x))
        torch.testing.assert_close(layer(x) - layer.base_layer(x), update / 64)


def test_shipped_decoder_configs_use_the_release_scale():
    from trainer.shared.config import load_config

    root = Path(__file__).parent.parent / "trainer" / "configs"
    for phase in ("encoder", "adapt"):
        config = load_config(phase, root / f"{phase}.yaml")
        assert config.decoder_lora_alpha / config.decoder_lora_rank == 1 / 64
        assert config.train_adaln


# ---- 2. which weights train -----------------------------------------------------------------


def _tiny_adaln_count() -> int:
    width = _DECODER_WIDTH
    time_dim = 16  # trainer.tiny's time_embed_dim
    return 2 * 2 * (time_dim * 6 * width + 6 * width)  # 2 blocks x norm1, norm2


def test_phase_a_trains_encoder_lora_adaln_and_motion_mlp(backbones, shards, tmp_path):
    from trainer.phases.encoder import EncoderPhase

    config = tiny_config("encoder", backbones, shards, tmp_path)
    names = _trainable(EncoderPhase(config, CPU, torch.float32))
    adaln = {n: c for n, c in names.items() if ".norm1.linear." in n or ".norm2.linear." in n}
    assert sorted(adaln) == sorted(
        f"decoder.transformer.transformer_blocks.{b}.norm{k}.linear.{w}"
        for b in range(2)
        for k in (1, 2)
        for w in ("weight", "bias")
    )
    assert sum(adaln.values()) == _tiny_adaln_count()
    lora = [n for n in names if "lora_" in n]
    motion = [n for n in names if ".time_embedding.motion." in n]
    encoder = [n for n in names if n.startswith("encoder.")]
    assert len(lora) == 2 * 4 * 2 and len(motion) == 4
    assert {n.split(".")[1] for n in encoder} == {"visual_proj", "text_proj"}
    # nothing else: the final layer's modulation, the patch embedding, the VAE stay frozen
    assert set(names) == set(adaln) | set(lora) | set(motion) | set(encoder)
    rank, width = config.decoder_lora_rank, _DECODER_WIDTH
    lora_count = 2 * 4 * rank * 2 * width
    motion_count = width * 16 + 16 + 16 * 16 + 16  # sinusoid -> 16 -> time_embed_dim 16
    encoder_count = sum(c for n, c in names.items() if n.startswith("encoder."))
    total = sum(names.values())
    assert total == encoder_count + lora_count + motion_count + _tiny_adaln_count()
    # narrowed: LoRA and the motion MLP only on the decoder side
    narrow = tiny_config("encoder", backbones, shards, tmp_path, train_adaln=False)
    assert sum(_trainable(EncoderPhase(narrow, CPU, torch.float32)).values()) == (
        total - _tiny_adaln_count()
    )


def test_warm_up_steps_the_motion_mlp_with_the_encoder_only(backbones, shards, tmp_path):
    from trainer.phases.encoder import EncoderPhase

    config = tiny_config("encoder", backbones, shards, tmp_path, encoder_warmup_steps=5)
    phase = EncoderPhase(config, CPU, torch.float32)
    for p in phase.parameters():
        if p.requires_grad:
            p.grad = torch.ones_like(p)
    phase.before_optimizer_step(0)
    stepped = {n for n, p in phase.named_parameters() if p.grad is not None}
    assert stepped == {n for n in _trainable(phase) if n.startswith("encoder.")} | {
        n for n in _trainable(phase) if ".time_embedding.motion." in n
    }
    config.warmup_trains_motion = False
    quiet = EncoderPhase(config, CPU, torch.float32)
    for p in quiet.parameters():
        if p.requires_grad:
            p.grad = torch.ones_like(p)
    quiet.before_optimizer_step(0)
    assert all(n.startswith("encoder.") for n, p in quiet.named_parameters() if p.grad is not None)


def test_mllm_trains_lora_embeddings_lm_head_and_every_rmsnorm(backbones, shards, tmp_path):
    from trainer.models import build

    config = tiny_config("mllm", backbones, shards, tmp_path)
    model = build.game_state_model(config, CPU, torch.float32)
    names = _trainable(model)
    llm = model.llm.get_base_model()
    vocab, hidden, layers = len(model.tokenizer), llm.config.hidden_size, 2
    whole = {n: c for n, c in names.items() if "modules_to_save" in n}
    assert sum(c for n, c in whole.items() if "embed_tokens" in n) == vocab * hidden
    assert sum(c for n, c in whole.items() if "lm_head" in n) == vocab * hidden
    norms = [n for n in whole if "norm" in n]
    assert len(norms) == 2 * layers + 1  # input and post-attention norms per layer, final norm
    lora = [n for n in names if "lora_" in n]
    assert len(lora) == 7 * 2 * layers
    ours = {n for n in names if n.split(".")[0] in ("queries", "input_proj", "output_proj")}
    assert set(names) == set(whole) | set(lora) | ours
    assert "embedding" in describe_trainable(model) and "RMSNorm" in describe_trainable(model)
    # the exported peft adapter carries them (modules_to_save), so it is complete on its own
    from peft import get_peft_model_state_dict

    exported = get_peft_model_state_dict(model.llm, save_embedding_layers=False)
    for part in ("embed_tokens.weight", "lm_head.weight", "model.norm.weight", "input_layernorm"):
        assert any(part in key for key in exported), part
    # narrowed: only the new tokens' rows of the embedding and lm_head, no norm
    narrow = build.game_state_model(
        tiny_config("mllm", backbones, shards, tmp_path, train_embeddings=False, train_norms=False),
        CPU,
        torch.float32,
    )
    small = _trainable(narrow)
    assert not any("modules_to_save" in n for n in small)
    new_rows = len(narrow.tokenizer) - len(mistral_tokenizer())
    assert sum(c for n, c in small.items() if "trainable_tokens" in n) == 2 * new_rows * hidden


def test_fully_trained_modules_are_fp32_inside_a_bf16_backbone(backbones, shards, tmp_path):
    from trainer.models import build

    config = tiny_config("mllm", backbones, shards, tmp_path)
    model = build.game_state_model(config, CPU, torch.bfloat16)
    for name, p in model.named_parameters():
        if "modules_to_save" in name:
            assert p.dtype == torch.float32, name
        elif not p.requires_grad:
            assert p.dtype == torch.bfloat16, name
    # the backbone around them still sees bf16: the next layer of a trained norm gets bf16
    norm = model.llm.get_base_model().model.norm
    out = norm(torch.randn(1, 3, model.llm.config.hidden_size, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16


def test_the_start_up_line_counts_trainable_weights_by_part(backbones, shards, tmp_path):
    from trainer.phases.encoder import build_phase
    from trainer.phases.loop import train

    config = tiny_config("encoder", backbones, shards, tmp_path, max_steps=0)
    lines: list[str] = []
    train("encoder", config, build_phase, resume=False, log=lines.append)
    counted = next(line for line in lines if "trainable weights:" in line)
    assert f"adaLN modulation {_tiny_adaln_count():,}" in counted
    assert "LoRA" in counted and "motion MLP" in counted and "encoder.visual_proj" in counted


# ---- 3. the MLLM's loss terms -----------------------------------------------------------------


def test_default_mllm_loss_is_ce_plus_mse(backbones, shards, tmp_path):
    from trainer.models import build
    from trainer.shared.config import load_config

    config = tiny_config("mllm", backbones, shards, tmp_path)
    defaults = load_config("mllm")
    assert (defaults.mse_weight, defaults.cosine_weight) == (1.0, 0.0)
    config.mse_weight, config.cosine_weight = defaults.mse_weight, defaults.cosine_weight
    model = build.game_state_model(config, CPU, torch.float32)
    turn = GAME_TURN
    sequences = [model.prompts.sequence([turn, turn])]
    history = [torch.randn(1, model.num_queries, model.shot_dim)]
    target = torch.randn(1, model.num_queries, model.shot_dim)
    out = model.loss(sequences, history, target, config.mse_weight, config.cosine_weight)
    assert out["cosine"] > 0  # measured and logged, but not in the loss
    torch.testing.assert_close(out["loss"].detach(), out["ce"] + out["mse"])
    ablation = model.loss(sequences, history, target, 0.5, 0.5)
    torch.testing.assert_close(
        ablation["loss"].detach(), ablation["ce"] + 0.5 * ablation["mse"] + 0.5 * ablation["cosine"]
    )


# ---- 4. gradient accumulation -------------------------------------------------------------------


def _one_step(backbones, shards, out: Path, **settings) -> dict[str, torch.Tensor]:
    from trainer.phases.encoder import build_phase
    from trainer.phases.loop import train

    config = tiny_config(
        "encoder",
        backbones,
        shards,
        out,
        max_steps=1,
        save_every=1,
        encoder_warmup_steps=0,
        lr=1e-2,
        **settings,
    )
    train("encoder", config, build_phase, resume=False, log=lambda *_: None)
    from trainer.shared import checkpoint

    return checkpoint.load(out)["trainable"]


@pytest.mark.slow  # four one-step runs, ~17 s
def test_accumulated_micro_batches_make_the_large_batch_step(backbones, shards, tmp_path):
    large = _one_step(backbones, shards, tmp_path / "large", batch_size=4)
    accumulated = _one_step(backbones, shards, tmp_path / "accum", batch_size=2, grad_accum=2)
    by_global = _one_step(backbones, shards, tmp_path / "global", batch_size=1, global_batch=4)
    assert large.keys() == accumulated.keys() == by_global.keys()
    for name in large:
        torch.testing.assert_close(
            accumulated[name], large[name], atol=2e-5, rtol=1e-4
        )  # lr 1e-2: a wrong step is off by ~1e-2
        torch.testing.assert_close(
            by_global[name], large[name], atol=2e-5, rtol=1e-4
        )  # lr 1e-2: a wrong step is off by ~1e-2
    # and it is a real step: half the batch gives other weights
    half = _one_step(backbones, shards, tmp_path / "half", batch_size=2)
    assert any(not torch.allclose(half[n], large[n], atol=1e-5) for n in large)


def test_global_batch_must_divide_into_micro_batches(backbones, shards, tmp_path):
    from core.settings import ConfigError
    from trainer.phases.loop import accumulation_steps

    config = tiny_config("encoder", backbones, shards, tmp_path, batch_size=2, global_batch=8)
    assert accumulation_steps(config, 2) == 2
    config.global_batch = 6
    with pytest.raises(ConfigError, match="global_batch=6 is not a multiple of batch_size x ranks"):
        accumulation_steps(config, 2)


def test_micro_batches_cover_the_large_batch_on_every_split():
    from trainer.shared.data import StepBatches

    def covered(batch, world, accum, step):
        return sorted(
            item
            for rank in range(world)
            for micro in range(accum)
            for item in StepBatches(37, batch, 3, rank, world, 0, accum).batch_for_step(step, micro)
        )

    for step in (0, 3, 11):
        large = covered(8, 1, 1, step)
        assert covered(2, 2, 2, step) == covered(1, 1, 8, step) == covered(4, 2, 1, step) == large


# ---- 5. T5 as the release calls it --------------------------------------------------------------


def test_t5_runs_without_a_mask_in_fp32(backbones, shards, tmp_path):
    from trainer.models import build

    config = tiny_config("encoder", backbones, shards, tmp_path)
    encoder = build.shot_encoder(config, CPU, torch.bfloat16)
    assert next(encoder.t5.parameters()).dtype == torch.float32  # bf16 run, fp32 T5
    calls: list[dict] = []
    encoder.t5.register_forward_pre_hook(
        lambda _m, _args, kwargs: calls.append(kwargs), with_kwargs=True
    )
    frames = torch.randint(0, 255, (2, 3, 16, 24), dtype=torch.uint8)
    _, text = encoder.features(frames, ["Quickly riding", "Slowly walking through the forest"])
    assert len(calls) == 1 and calls[0].get("attention_mask") is None
    assert calls[0]["input_ids"].shape == (2, config.text_tokens)
    # without a mask the padding changes the features of the words before it, as in the release
    masked = build.shot_encoder(
        tiny_config("encoder", backbones, shards, tmp_path, t5_attention_mask=True),
        CPU,
        torch.float32,
    )
    _, with_mask = masked.features(frames, ["Quickly riding", "Slowly walking through the forest"])
    assert not torch.allclose(text[0, :2], with_mask[0, :2])
