"""`python -m bench.gpu` up to its CUDA boundary: the no-GPU exit, the FLOPs formula against
PyTorch's own FLOP counter, the real-size configurations built on the meta device, the tokenizers
built here, and the table/JSON writer. The GPU figures themselves come from a lent GPU
(bench/results/, docs/gpu.md)."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import trainer  # noqa: F401  (makes torchvision importable before transformers)
from bench.gpu import captioning, cli, common, flops, models, training


def test_without_cuda_it_says_so_and_exits_0(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "gpu.json"
    assert cli.main(["--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == cli.NO_CUDA
    assert not out.exists()


def test_a_setting_that_runs_out_of_memory_becomes_an_error_row(monkeypatch):
    released = []
    monkeypatch.setattr(common, "release_memory", lambda: released.append(True))

    def too_big() -> dict:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    assert common.within_memory(too_big) == {
        "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 80.00 GiB"
    }
    assert common.within_memory(lambda: {"pairs_per_s": 9.2}) == {"pairs_per_s": 9.2}
    assert released == [True, True]  # memory is given back after a failure and a success


def test_unknown_part_is_refused(capsys):
    assert cli.main(["--device", "cpu", "--parts", "memflow,warp"]) == 2
    assert "warp" in capsys.readouterr().err


# ---- FLOPs ----------------------------------------------------------------------------------


def test_transformer_formula_by_hand():
    # 2 N T + 4 L T^2 D, and the step: 2 x products + 3 x LoRA + 3 x attention
    attention = flops.Attention(layers=2, width=8)
    assert flops.forward_flops(100, 10, attention) == 2 * 100 * 10 + 4 * 2 * 10 * 10 * 8
    step = flops.training_flops(100, 5, 10, attention)
    assert step == 2 * (2 * 100 * 10) + 3 * (2 * 5 * 10) + 3 * (4 * 2 * 100 * 8)
    assert flops.mfu(500e12, 1.0, 1000.0) == pytest.approx(0.5)
    assert flops.mfu(1.0, 1.0, None) is None
    assert flops.peak_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert flops.peak_tflops("Tesla T4") is None


@pytest.mark.slow
def test_lora_step_flops_match_pytorchs_counter():
    """A frozen Mistral with LoRA, forward + backward: the formula agrees with what torch's FLOP
    counter sees (matrix products and attention)."""
    from peft import LoraConfig, get_peft_model
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    config = MistralConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=None,
    )
    # eager attention: its products are visible to the counter (CPU SDPA kernels are not)
    llm = MistralForCausalLM._from_config(config, attn_implementation="eager")
    llm.requires_grad_(False)
    model = get_peft_model(
        llm,
        LoraConfig(r=8, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]),
    )
    tokens = 48
    # the MLLM's inputs come through its trained input projection: gradients reach layer 0
    embeds = torch.randn(1, tokens, config.hidden_size, requires_grad=True)
    mask = torch.zeros(1, 1, tokens, tokens)  # dense 4D mask, as the MLLM gives
    with FlopCounterMode(display=False) as counter:
        out = model(inputs_embeds=embeds, attention_mask=mask, use_cache=False)
        out.logits.float().pow(2).mean().backward()
    counted = counter.get_total_flops()
    attention = flops.Attention(config.num_hidden_layers, config.hidden_size)
    formula = training.training_flops_of(llm, tokens, attention)
    assert flops.matmul_weights(llm, trainable=True) == sum(
        p.numel() for p in model.parameters() if p.requires_grad
    )
    assert formula == pytest.approx(counted, rel=0.03)


def test_matmul_weights_leave_lora_and_embeddings_out():
    layer = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 6))
    assert flops.matmul_weights(layer) == 24
    assert flops.matmul_weights(layer, trainable=True) == 0


# ---- the real sizes, on the meta device ----------------------------------------------------


def _count(module) -> float:
    return sum(p.numel() for p in module.parameters()) / 1e9


@pytest.mark.slow  # over 1.5 s (README, "Test time")
def test_internvl_2_5_8b_configuration_has_its_published_size():
    from transformers import InternVLForConditionalGeneration

    with torch.device("meta"):
        model = InternVLForConditionalGeneration(
            models.internvl_config(models.INTERNVL_2_5_8B, image_token_id=92546)
        )
    assert _count(model) == pytest.approx(8.075, abs=0.002)  # InternVL2.5-8B: 8.08B
    assert _count(model.model.vision_tower) == pytest.approx(0.304, abs=0.002)  # InternViT-300M
    text = model.config.text_config
    assert (text.hidden_size, text.num_hidden_layers, text.vocab_size) == (4096, 32, 92553)
    assert model.config.architectures is None or "InternVL" in model.config.architectures[0]
    assert text.architectures == ["LlamaForCausalLM"]  # lmdeploy's PyTorch engine reads it


@pytest.mark.slow
def test_trainer_backbones_have_their_published_sizes():
    with torch.device("meta"):
        transformer, _vae, _ = models.cogvideox(models.REAL)
        llm, _ = models.mistral(models.REAL)
        clip = models.clip_vision(models.REAL)
    assert _count(transformer) == pytest.approx(1.69, abs=0.01)  # CogVideoX-2B's transformer
    assert _count(llm) == pytest.approx(7.24, abs=0.01)  # Mistral-7B
    assert _count(clip) == pytest.approx(0.0858, abs=0.001)  # CLIP ViT-B/16 vision tower
    assert models.decoder_width_and_slot(models.REAL) == (1920, 226)
    assert models.decoder_width_and_slot(models.TINY) == (32, 20)


@pytest.mark.slow  # over 1.5 s (README, "Test time")
def test_phase_a_decoder_step_flops_at_real_size():
    """CogVideoX-2B over 226 text + 5 x 30 x 45 video tokens (17 frames of 480x720)."""
    with torch.device("meta"):
        transformer, _, _ = models.cogvideox(models.REAL)
    tc = transformer.config
    assert (tc.num_layers, tc.num_attention_heads * tc.attention_head_dim) == (30, 1920)
    tokens = 226 + 5 * (480 // 8 // tc.patch_size) * (720 // 8 // tc.patch_size)
    assert tokens == 6976
    step = training.training_flops_of(transformer, tokens, flops.Attention(30, 1920))
    # 2 x 2NT with N ~ 1.69B matmul weights, plus 3 x 4 L T^2 D of attention: ~81 TFLOP
    assert step == pytest.approx(80.9e12, rel=0.01)


# ---- tokenizers built here -----------------------------------------------------------------


def test_word_tokenizer_has_the_exact_vocabulary_and_keeps_special_tokens_whole():
    tokenizer = models.word_tokenizer(
        700,
        {"unk_token": "<unk>", "eos_token": "<|im_end|>", "pad_token": "</s>"},
        {"context_image_token": "<IMG_CONTEXT>"},
    )
    assert len(tokenizer) == 700
    ids = tokenizer("Image-1: <IMG_CONTEXT> the movement level", add_special_tokens=False).input_ids
    assert tokenizer.context_image_token_id in ids
    assert tokenizer.unk_token_id not in ids  # the prompts' words are in the vocabulary
    assert tokenizer.convert_ids_to_tokens(699).startswith("w")  # filler up to the real size
    assert all(tokenizer.decode([i]) for i in range(690, 700))  # any id decodes to text


# ---- the table and the JSON ----------------------------------------------------------------


def test_table_and_report_keep_every_row(tmp_path):
    rows = [
        {"part": "memflow", "setting": "480x720 batch 1", "pairs_per_s": 9.17},
        {"part": "caption", "setting": "lmdeploy-turbomind", "error": "RuntimeError: no TurboMind"},
        {"part": "train_b", "setting": "batch 4", "s_per_step": 0.807, "mfu": 0.169},
    ]
    table = cli.format_table(rows).splitlines()
    assert table[0].split()[:3] == ["part", "setting", "pairs_per_s"]
    assert len(table) == 4
    assert "9.17" in table[1] and table[2].endswith("RuntimeError: no TurboMind")
    assert "0.169" in table[3]
    path = tmp_path / "out" / "gpu.json"
    cli.write_report({"device": "cpu", "rows": rows}, path)
    assert json.loads(path.read_text())["rows"] == rows
    assert not list(path.parent.glob("*.tmp"))


def test_a_failing_part_becomes_a_row_and_the_next_part_runs(tmp_path):
    def broken(settings):
        yield {"setting": "first", "pairs_per_s": 1.0}
        raise ValueError("kaputt")

    def fine(settings):
        yield {"setting": "ok", "s_per_step": 2.0}

    rows, saved = [], []
    settings = common.Settings(device="cpu", tiny=True, workdir=tmp_path, film=tmp_path)
    common.run_part("memflow", broken, settings, rows, lambda: saved.append(len(rows)))
    common.run_part("train_a", fine, settings, rows, lambda: saved.append(len(rows)))
    assert [r["part"] for r in rows] == ["memflow", "memflow", "train_a"]
    assert rows[1] == {"part": "memflow", "setting": "-", "error": "ValueError: kaputt"}
    assert saved == [1, 3]  # written after each measured row


def test_a_failed_request_is_an_error_not_throughput():
    from stages.captioning.engines import Completion

    class HalfBroken:
        def load(self):
            pass

        def generate(self, requests):
            return [Completion("a", "text"), Completion("b", None, "AssertionError: 0 vs 2")]

    counted = captioning.CountingEngine(HalfBroken())
    counted.generate([])
    timed = {"clips": 1, "requests": 2, "seconds": 0.5, "by_status": {"caption_failed": 1}}
    settings = common.Settings(device="cpu", tiny=True, workdir=None, film=None)
    row = captioning.caption_row("lmdeploy-pytorch", 8, timed, counted, settings)
    assert row["engine_errors"] == 1 and "clips_per_s" not in row
    assert row["error"] == "1 of 2 requests failed: AssertionError: 0 vs 2"


def test_clips_per_second_counts_only_the_clips_sent_to_the_engine():
    """A clip the stage skipped (unusable, broken) cost no model time: counting it would inflate
    the throughput (the sintel sample has 4 of 7 clips rejected for text)."""

    class Fine:
        def load(self):
            pass

    counted = captioning.CountingEngine(Fine())
    by_status = {"caption_failed": 3, "skipped_unusable": 4}
    timed = {"clips": 7, "requests": 6, "seconds": 1.5, "by_status": by_status}
    settings = common.Settings(device="cpu", tiny=True, workdir=None, film=None)
    row = captioning.caption_row("transformers", 8, timed, counted, settings)
    assert (row["clips"], row["film_clips"], row["clips_per_s"]) == (3, 7, 2.0)


@pytest.mark.slow
def test_training_parts_run_at_toy_size_on_the_cpu(tmp_path):
    """The training parts' whole path (random backbones swapped in, the phases built by the
    trainer, its optimiser step, the FLOPs) at toy sizes; only CUDA timing is left to a GPU."""
    out = tmp_path / "gpu.json"
    args = ["--tiny", "--device", "cpu", "--parts", "train_a,train_b", "--steps", "1"]
    args += ["--encoder-batches", "1", "--mllm-batches", "1", "--mllm-checkpointed-batches", "2"]
    assert cli.main([*args, "--workdir", str(tmp_path), "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["part"] for r in rows] == ["train_a", "train_b", "train_b"]
    assert all("error" not in r for r in rows), rows
    assert all(r["s_per_step"] > 0 and r["model_tflop_per_step"] > 0 for r in rows)
    assert rows[2]["setting"].endswith("batch 2, grad ckpt")
    assert (tmp_path / "train-encoder-for-mllm" / "checkpoints" / "latest").is_file()


@pytest.mark.slow
def test_transnet_part_runs_the_real_network_on_the_cpu(tmp_path, capsys):
    """The TransNetV2 row's whole path (the package's weights, loaded as stages/transnet.py does,
    its 100-frame windows); only the CUDA figure is left to a GPU."""
    out = tmp_path / "gpu.json"
    args = ["--tiny", "--device", "cpu", "--parts", "transnet", "--workdir", str(tmp_path)]
    assert cli.main([*args, "--out", str(out)]) == 0
    [row] = json.loads(out.read_text())["rows"]
    assert row["part"] == "transnet" and "error" not in row, row
    assert row["frames_per_s"] > 0
    assert "frames_per_s" in capsys.readouterr().out
