"""The three training phases, play and DDP, with tiny random-weight backbones on CPU.

The backbones are written to disk in the real checkpoints' formats (trainer.tiny) and loaded by
the same code that loads CogVideoX-2B, Mistral-7B, CLIP and T5. The shards come from the
pipeline's run on tests/media/bikes.mp4 when the `bikes_dataset` fixture exists (captions filled
in here), else from real frames of that video written by tests/conftest.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trainer_inputs import tiny_config, tiny_settings, with_captions, write_bikes_dataset

import trainer  # noqa: F401  (makes torchvision importable before transformers)
from trainer.phases.loop import train
from trainer.shared import checkpoint
from trainer.shared.data import collate

ROOT = Path(__file__).parent.parent


@pytest.fixture(scope="module")
def shards(request, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("shards")
    try:
        film = request.getfixturevalue("bikes_dataset")
    except pytest.FixtureLookupError:
        return write_bikes_dataset(out)
    return with_captions(Path(film), out)


def run_phase(phase: str, config, resume: bool = True) -> list[dict]:
    import importlib

    module = importlib.import_module(f"trainer.phases.{phase}")
    return train(phase, config, module.build_phase, resume=resume, log=lambda *_: None)


def losses(metrics: list[dict]) -> list[float]:
    return [m["loss"] for m in metrics]


def resume_from_step_2(run_dir: Path, copy_dir: Path) -> Path:
    """A run folder holding only the run's step-2 checkpoint: as if it stopped there."""
    target = copy_dir / "checkpoints"
    target.mkdir(parents=True)
    shutil.copytree(run_dir / "checkpoints" / "step-00000002", target / "step-00000002")
    (target / "latest").write_text("step-00000002")
    return copy_dir


@pytest.fixture(scope="module")
def encoder_run(backbones, shards, tmp_path_factory):
    out = tmp_path_factory.mktemp("encoder")
    config = tiny_config(
        "encoder", backbones, shards, out, max_steps=4, encoder_warmup_steps=2, lr=1e-2
    )
    return out, config, run_phase("encoder", config)


# The phase (b) run of mllm_run, also the one process that two gloo processes must agree with.
MLLM_RUN = {"max_steps": 4, "max_turns": 3, "lr": 3e-3}


@pytest.fixture(scope="module")
def mllm_run(backbones, shards, encoder_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("mllm")
    config = tiny_config(
        "mllm", backbones, shards, out, **MLLM_RUN, encoder_checkpoint=str(encoder_run[0])
    )
    return out, config, run_phase("mllm", config)


@pytest.fixture(scope="module")
def adapt_run(backbones, shards, encoder_run, mllm_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("adapt")
    config = tiny_config(
        "adapt",
        backbones,
        shards,
        out,
        max_steps=2,
        max_turns=3,
        lr=1e-3,
        encoder_checkpoint=str(encoder_run[0]),
        mllm_checkpoint=str(mllm_run[0]),
    )
    return out, config, run_phase("adapt", config)


@pytest.mark.slow
def test_encoder_phase_trains_checkpoints_and_exports_lora(encoder_run):
    out, _config, metrics = encoder_run
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    assert all(0 < loss < 10 for loss in losses(metrics))
    state = checkpoint.load(out)
    assert state["step"] == 4 and state["phase"] == "encoder" and state["config"]["max_steps"] == 4
    assert state["optimizer"]["state"], "optimiser moments are saved for resume"
    adapter = out / "checkpoints" / "step-00000004" / "decoder_lora"
    settings = json.loads((adapter / "adapter_config.json").read_text())
    assert settings["r"] == 4 and set(settings["target_modules"]) == {
        "to_q",
        "to_k",
        "to_v",
        "to_out.0",
    }
    from safetensors.torch import load_file

    weights = load_file(adapter / "adapter_model.safetensors")
    assert any(k.endswith("attn1.to_q.lora_A.weight") for k in weights)


@pytest.mark.slow
def test_warm_up_trains_the_encoder_and_motion_mlp_only(encoder_run):
    out, _, _ = encoder_run
    after_warmup = checkpoint.load(out / "checkpoints" / "step-00000002")["trainable"]
    after_joint = checkpoint.load(out)["trainable"]
    lora_b = [k for k in after_warmup if k.startswith("decoder.") and "lora_B" in k]
    adaln = [k for k in after_warmup if ".norm1.linear." in k or ".norm2.linear." in k]
    motion = [k for k in after_warmup if "time_embedding.motion.2" in k]
    assert lora_b and adaln and motion
    for name in lora_b:  # zero-initialised, untouched in warm-up, then trained
        assert not after_warmup[name].any(), name
    assert any(after_joint[name].any() for name in lora_b)
    # the motion MLP's zero-initialised last layer learns from the first step (the release's
    # warm-up trains `flow`); the adaLN modulation waits for the joint steps, then moves
    assert all(after_warmup[name].any() for name in motion)
    assert all(not torch.equal(after_warmup[n], after_joint[n]) for n in adaln)
    assert all(k.startswith(("encoder.", "decoder.")) for k in after_joint)


@pytest.mark.slow
def test_encoder_phase_resumes_exactly(encoder_run, tmp_path):
    out, config, metrics = encoder_run
    config.out_dir = str(resume_from_step_2(out, tmp_path / "resumed"))
    resumed = run_phase("encoder", config)
    assert [m["step"] for m in resumed] == [3, 4]
    assert losses(resumed) == pytest.approx(losses(metrics)[2:], abs=1e-6)
    _assert_same_weights(
        checkpoint.load(out)["trainable"], checkpoint.load(config.out_dir)["trainable"]
    )


def _overfit(module_name: str, config, steps: int, lr: float) -> list[dict]:
    import importlib

    model, dataset = importlib.import_module(module_name).build_phase(
        config, torch.device("cpu"), torch.float32
    )
    batch = collate([dataset[(i, i)] for i in range(min(2, len(dataset)))])
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    history = []
    for step in range(steps):
        out = model(batch, step)
        out["loss"].backward()
        optimizer.step()
        optimizer.zero_grad()
        history.append({k: float(v.detach()) for k, v in out.items()})
    return history


@pytest.mark.slow
def test_encoder_and_decoder_overfit_one_batch(backbones, shards, tmp_path):
    config = tiny_config("encoder", backbones, shards, tmp_path, encoder_warmup_steps=0)
    history = losses(_overfit("trainer.phases.encoder", config, steps=10, lr=3e-2))
    assert history[-1] < 0.85 * history[0], history


@pytest.mark.slow
def test_mllm_phase_trains_and_exports_a_standard_peft_adapter(mllm_run, backbones):
    out, _, metrics = mllm_run
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    assert all({"ce", "mse", "cosine"} <= set(m) for m in metrics)
    from peft import PeftModel
    from transformers import AutoTokenizer, MistralForCausalLM

    adapter = out / "checkpoints" / "step-00000004" / "mllm_lora"
    tokenizer = AutoTokenizer.from_pretrained(adapter)
    assert "<MS>" in tokenizer.get_vocab() and "<ANIME_19>" in tokenizer.get_vocab()
    base = MistralForCausalLM.from_pretrained(backbones["mistral_model"])
    base.resize_token_embeddings(len(tokenizer))
    model = PeftModel.from_pretrained(base, adapter)
    trained = checkpoint.load(out)["trainable"]
    name = "layers.0.self_attn.q_proj.lora_B.default.weight"
    loaded = dict(model.named_parameters())[f"base_model.model.model.{name}"]
    assert torch.equal(loaded, trained[f"mllm.llm.base_model.model.model.{name}"])
    assert loaded.any()


@pytest.mark.slow
def test_mllm_phase_resumes_exactly(mllm_run, tmp_path):
    out, config, metrics = mllm_run
    config.out_dir = str(resume_from_step_2(out, tmp_path / "resumed"))
    resumed = run_phase("mllm", config)
    assert losses(resumed) == pytest.approx(losses(metrics)[2:], abs=1e-6)
    _assert_same_weights(
        checkpoint.load(out)["trainable"], checkpoint.load(config.out_dir)["trainable"]
    )


@pytest.mark.slow
def test_mllm_overfits_one_batch(backbones, shards, encoder_run, tmp_path):
    config = tiny_config(
        "mllm", backbones, shards, tmp_path, max_turns=3, encoder_checkpoint=str(encoder_run[0])
    )
    history = _overfit("trainer.phases.mllm", config, steps=12, lr=1e-2)
    first, last = history[0], history[-1]
    assert last["loss"] < 0.5 * first["loss"], (first, last)
    assert last["ce"] < 0.5 * first["ce"] and last["mse"] < first["mse"]


@pytest.mark.slow
def test_adapt_phase_starts_from_phase_a_and_trains_only_the_decoder(adapt_run, encoder_run):
    out, _config, metrics = adapt_run
    assert [m["step"] for m in metrics] == [1, 2] and all(0 < loss < 10 for loss in losses(metrics))
    trained = checkpoint.load(out)["trainable"]
    assert trained and all(k.startswith("decoder.") for k in trained)
    phase_a = checkpoint.load(encoder_run[0])["trainable"]
    assert set(trained) == {k for k in phase_a if k.startswith("decoder.")}
    assert (
        out / "checkpoints" / "step-00000002" / "decoder_lora" / "adapter_model.safetensors"
    ).is_file()


@pytest.mark.slow
def test_play_predicts_states_and_renders_shots(mllm_run, adapt_run, tmp_path):
    from core.video import decode_mp4
    from trainer.delivery.play import play

    instructions = [
        "Character: girl; Motion: quickly riding a bike; Background: road.",
        "Character: boy; Motion: slowly walking; Background: street.",
        "Character: cat; Motion: gently turning; Background: city.",
    ]
    records = list(
        play(str(mllm_run[0]), instructions, tmp_path, str(adapt_run[0]), history=1, steps=2)
    )
    assert [r["turn"] for r in records] == [0, 1, 2]
    for record in records:
        assert record["motion_level"] in range(1, 6) and record["stamina"] in (-1, 1)
        assert record["social"] in (0, 1) and record["entertainment"] in (0, 1)
        frames = decode_mp4((tmp_path / record["video"]).read_bytes())
        assert frames.shape == (17, 16, 24, 3)
        # the representative scope of the levels file the shards were labelled with (bundled)
        assert record["motion_scope"] == [0.5, 2.5, 10.0, 15.0, 40.0][record["motion_level"] - 1]
    assert records[-1]["totals"]["stamina"] == sum(r["stamina"] for r in records)
    assert len((tmp_path / "states.jsonl").read_text().splitlines()) == 3


def test_play_rejects_a_malformed_instruction_file(tmp_path, capsys):
    from trainer.delivery.play import main

    path = tmp_path / "demo.txt"
    path.write_text("Character: girl; Motion: run; Background: road.\nrun left\n")
    assert main(["--mllm", str(tmp_path), "--instructions", str(path), "--out", str(tmp_path)]) == 2
    assert "demo.txt:2: not a game instruction" in capsys.readouterr().err


@pytest.mark.slow
def test_train_cli_names_a_missing_checkpoint(backbones, shards, tmp_path, capsys):
    from trainer.phases.cli import main

    settings = {**tiny_settings(backbones), "clip_model": tmp_path / "no-clip"}
    argv = ["--phase", "encoder", "--shards", str(shards), "--out", str(tmp_path)]
    code = main(
        argv
        + [
            item
            for k, v in settings.items()
            if k != "lora_dropout" and not k.startswith("lora_")
            for item in ("--set", f"{k}={v}")
        ]
    )
    assert (
        code == 2
        and f"clip_model={tmp_path / 'no-clip'}: no such checkpoint" in capsys.readouterr().err
    )


@pytest.mark.slow
def test_two_gloo_processes_agree_with_one(backbones, shards, encoder_run, mllm_run, tmp_path):
    """mllm_run is the one process (batch 2); two processes of batch 1 under torchrun, with its
    settings otherwise (save_every changes no step), take the same steps to the same weights."""
    one, _, single_metrics = mllm_run
    assert tiny_settings(backbones)["batch_size"] == 2
    settings = {
        **tiny_settings(backbones),
        **MLLM_RUN,
        "encoder_checkpoint": str(encoder_run[0]),
        "batch_size": 1,
        "save_every": MLLM_RUN["max_steps"],
    }
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "trainer.cli",
        "--phase",
        "mllm",
        "--shards",
        str(shards),
        "--out",
        str(tmp_path / "two"),
    ]
    from trainer.shared.config import MllmConfig

    for name, value in settings.items():
        if name in MllmConfig.__dataclass_fields__:
            command += ["--set", f"{name}={value}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = _run_group(command, env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    two = [
        json.loads(line) for line in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [m["step"] for m in two] == [1, 2, 3, 4]
    assert losses(two) == pytest.approx(losses(single_metrics), rel=1e-4, abs=1e-5)
    _assert_same_weights(
        checkpoint.load(one)["trainable"],
        checkpoint.load(tmp_path / "two")["trainable"],
        atol=1e-5,
    )


def _assert_same_weights(a: dict, b: dict, atol: float = 1e-6) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], atol=atol), name


def _run_group(command, env, timeout):
    """Run torchrun in its own process group and kill the whole group on a timeout, so a hung
    rank never outlives the test."""
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise AssertionError(
            f"torchrun did not finish in {timeout} s:\n{stdout[-2000:]}\n{stderr[-2000:]}"
        ) from None
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.mark.slow
def test_gradient_checkpointing_really_runs_in_the_mllm(backbones, shards, tmp_path):
    """transformers checkpoints only in training mode: the frozen LLM must not sit in eval()."""
    from trainer.models.build import game_state_model

    config = tiny_config("mllm", backbones, shards, tmp_path, gradient_checkpointing=True)
    model = game_state_model(config, torch.device("cpu"), torch.float32)
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in model.llm.modules() if isinstance(m, GradientCheckpointingLayer)]
    assert layers
    calls = []
    for layer in layers:

        def counting(*args, _run=layer._gradient_checkpointing_func, **kwargs):
            calls.append(1)
            return _run(*args, **kwargs)

        layer._gradient_checkpointing_func = counting
    turn = {
        "instruction": "Character: girl; Motion: runs; Background: road.",
        "motion_level": 2,
        "stamina": -1,
        "social": 0,
        "entertainment": 1,
    }
    model([model.prompts.sequence([turn])], [torch.zeros(0, model.num_queries, model.shot_dim)])
    assert len(calls) == len(layers), "layers ran without checkpointing"


@pytest.mark.slow
def test_later_phases_refuse_settings_their_checkpoint_was_not_trained_with(
    backbones, shards, encoder_run, tmp_path
):
    config = tiny_config(
        "mllm", backbones, shards, tmp_path, encoder_checkpoint=str(encoder_run[0]), clip_layer=-1
    )
    with pytest.raises(ValueError, match=r"clip_layer=-1 \(checkpoint: -2\)"):
        run_phase("mllm", config)
