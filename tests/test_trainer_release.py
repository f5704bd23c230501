"""The trainer against the released AnimeGamer code: condition dropout, guided sampling, the CLIP
input, the action text, the release's prompt layout, safe checkpoints, export and the paper's
metrics, all with tiny random-weight models on CPU."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from trainer_inputs import GAME_TURN, tiny_config

import trainer  # noqa: F401  (makes torchvision importable before transformers)
from prompts.game import action_text, instruction_text
from trainer.shared import checkpoint

# trainer.build (transformers, peft, diffusers: seconds) is imported in the tests that build a
# part, not at collection, which every test worker pays.


def _encoder_config(backbones, shards, tmp_path, **settings):
    return tiny_config("encoder", backbones, shards, tmp_path, **settings)


# ---- the action text and the instruction: one rule ------------------------------------------


def test_action_text_puts_the_adverb_first_as_the_paper():
    assert action_text("softly", "talk") == "Softly talk"
    assert action_text(None, "run") == "Run"
    assert instruction_text(["Qiqi"], "Girl", "quickly", "flying on broomstick", "day sky") == (
        "Character: Qiqi; Motion: quickly flying on broomstick; Background: day sky."
    )
    assert instruction_text(["Sintel", "Scales"], "Girl", "slowly", "run", "forest").startswith(
        "Character: Sintel, Scales; "
    )
    assert instruction_text([], "Girl", "slowly", None, "forest") is None


# ---- E_a: condition dropout and the CLIP input -----------------------------------------------


def test_condition_dropout_drops_and_is_counted(backbones, shards, tmp_path):
    from trainer.models import build
    from trainer.models.encoder import ConditionDrop

    config = _encoder_config(backbones, shards, tmp_path)
    encoder = build.shot_encoder(config, torch.device("cpu"), torch.float32)
    frames = torch.randint(0, 255, (4, 3, 16, 24), dtype=torch.uint8)
    actions = ["Quickly riding", "Slowly walking", "Gently turning", "Fast running"]
    generators = [torch.Generator().manual_seed(i) for i in range(4)]
    everything = ConditionDrop.draw(generators, 1.0, 0.0, 1.0)
    shots = encoder(frames, actions, everything)
    torch.testing.assert_close(shots, encoder.unconditional(4))
    assert {k: float(v) for k, v in everything.fractions().items()} == {
        "drop_text": 1.0,
        "drop_empty_text": 0.0,
        "drop_image": 1.0,
        "drop_all": 1.0,
    }
    nothing = ConditionDrop.draw(generators, 0.0, 0.0, 0.0)
    torch.testing.assert_close(encoder(frames, actions, nothing), encoder(frames, actions))
    # text only: the CLIP half is kept, the T5 half is the unconditional one
    text_only = ConditionDrop.draw(generators, 1.0, 0.0, 0.0)
    dropped = encoder(frames, actions, text_only)
    tokens = config.text_tokens
    torch.testing.assert_close(dropped[:, :tokens], encoder.unconditional(4)[:, :tokens])
    assert not torch.allclose(dropped[:, tokens:], encoder.unconditional(4)[:, tokens:])
    # at the release's rates, about a tenth of many samples lose their text
    many = [torch.Generator().manual_seed(i) for i in range(2000)]
    shares = ConditionDrop.draw(many, 0.1, 0.05, 0.05).fractions()
    assert 0.08 < float(shares["drop_text"]) < 0.12
    assert 0.03 < float(shares["drop_image"]) < 0.07


def test_clip_sees_the_whole_frame_by_default(backbones, shards, tmp_path):
    from trainer.models import build

    frame = torch.zeros(1, 3, 48, 72, dtype=torch.uint8)
    frame[:, 0, :, :12] = 255  # a red band in the left sixth of the frame
    red_in_view = {}
    for mode in ("resize", "center_crop"):
        config = _encoder_config(backbones, shards, tmp_path, clip_input=mode)
        encoder = build.shot_encoder(config, torch.device("cpu"), torch.float32)
        pixels = encoder.preprocess(frame) * encoder.std + encoder.mean
        red_in_view[mode] = float(pixels[0, 0].max())
    assert red_in_view["resize"] > 0.9  # the release: the whole frame squeezed to a square
    assert red_in_view["center_crop"] < 0.1  # the centre square loses the band


# ---- D_a: guided sampling ---------------------------------------------------------------------


def test_guidance_changes_the_sample_and_scale_one_is_unguided(backbones, shards, tmp_path):
    from trainer.models import build
    from trainer.models.decoder import Guidance, guidance_from

    torch.manual_seed(0)  # the perturbation and the shots below: the same test every run
    config = _encoder_config(backbones, shards, tmp_path)
    decoder = build.shot_decoder(config, torch.device("cpu"), torch.float32).eval()
    with torch.no_grad():  # a non-zero motion MLP and LoRA, so the shot matters
        for p in decoder.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.5)
    shot = torch.randn(1, decoder.text_slot, 32)
    unconditional = torch.randn(1, decoder.text_slot, 32)

    def sample(guidance, sampler="dpm++2m"):
        return decoder.generate(
            shot,
            torch.tensor([5.0]),
            17,
            (16, 24),
            steps=4,
            generator=torch.Generator().manual_seed(0),
            unconditional=unconditional,
            guidance=guidance,
            sampler=sampler,
        )

    config.guidance_scale = 1.0
    assert guidance_from(config) is None  # scale 1: one conditional pass, as the release
    unguided = sample(None)
    assert torch.equal(sample(None), unguided)  # seeded: reproducible
    # the two-pass guided path at weight 1 is the conditional prediction
    through_guidance = sample(Guidance(1.0, "constant"))
    assert (through_guidance.int() - unguided.int()).abs().max() <= 1
    # scale 6 moves the picture far beyond rounding (seeds 0-3 gave a mean of 5 to 41 levels)
    constant = sample(Guidance(6.0, "constant"))
    assert (constant.int() - unguided.int()).abs().float().mean() > 2
    # the release's dynamic weight is near 1 for most of a 4-step schedule, so it moves less,
    # but still past the rounding that separates the guided path at weight 1 from unguided
    guided = sample(Guidance(6.0, "dynamic", 5.0))
    assert (guided.int() - unguided.int()).abs().max() > 1
    assert not torch.equal(sample(Guidance(6.0), "ddim"), guided)


def test_dynamic_guidance_weights_follow_the_release_formula():
    import math

    from trainer.models.decoder import Guidance

    dynamic = Guidance(6.0, "dynamic", 5.0)
    for t in (999, 500, 19):
        ramp = (50 - t) / 50
        assert dynamic.weight(t, 50) == pytest.approx(1 + 6 * (1 - math.cos(math.pi * ramp**5)) / 2)
        assert 1.0 <= dynamic.weight(t, 50) <= 7.0
    assert Guidance(6.0, "constant").weight(999, 50) == 6.0


def test_the_noise_schedule_is_the_release_zero_snr_shift_3(backbones, shards, tmp_path):
    from trainer.models import build

    config = _encoder_config(backbones, shards, tmp_path)
    scheduler = build.shot_decoder(config, torch.device("cpu"), torch.float32).scheduler
    assert scheduler.config.snr_shift_scale == 3.0 and scheduler.config.rescale_betas_zero_snr
    assert float(scheduler.alphas_cumprod[-1]) == pytest.approx(0.0, abs=1e-6)  # terminal SNR 0
    # the release's ZeroSNRDDPMDiscretization: shift alpha_bar, then rescale sqrt(alpha_bar)
    betas = torch.linspace(0.00085**0.5, 0.012**0.5, 1000, dtype=torch.float64) ** 2
    alphas = torch.cumprod(1 - betas, 0)
    alphas = alphas / (3.0 + (1 - 3.0) * alphas)
    root = alphas.sqrt()
    root = (root - root[-1]) * root[0] / (root[0] - root[-1])
    torch.testing.assert_close(scheduler.alphas_cumprod.double(), root**2, atol=1e-5, rtol=1e-4)


# ---- the release's prompt layout ----------------------------------------------------------------


def test_release_layout_writes_turns_as_the_released_model_reads_them():
    from trainer.shared.prompt import IGNORE, PromptBuilder, add_game_tokens, parse_states
    from trainer.shared.tiny import mistral_tokenizer

    tokenizer = mistral_tokenizer()
    add_game_tokens(tokenizer, 3, "release")
    prompts = PromptBuilder(tokenizer, 3, "release")
    turn = GAME_TURN
    seq = prompts.sequence([turn, turn])
    text = tokenizer.decode(seq.input_ids)
    assert "<TURN>" in text and "<frame_00002>" in text and "</TURN>" in text
    labelled = [i for i, lab in zip(seq.input_ids, seq.labels) if lab != IGNORE]
    decoded = tokenizer.decode(labelled)
    assert decoded.replace(" ", "").startswith("<ML><Strength_3></ML><SC><Strength_0></SC>")
    assert parse_states(decoded, "release") == {
        "motion_level": 3,
        "social": 0,
        "entertainment": 1,
        "stamina": -1,
    }


def test_play_reads_states_in_the_release_layout(backbones, shards, tmp_path):
    from trainer.delivery.play import predict_turn
    from trainer.models import build

    config = tiny_config("mllm", backbones, shards, tmp_path, prompt_format="release")
    model = build.game_state_model(config, torch.device("cpu"), torch.float32).eval()
    assert "<Strength_-1>" in model.tokenizer.get_added_vocab()
    turn = {"instruction": "Character: girl; Motion: quickly riding; Background: road."}
    shot, states = predict_turn(model, [turn], [])
    assert shot.shape == (model.num_queries, model.shot_dim)
    assert states["motion_level"] in range(1, 6) and states["stamina"] in (-1, 1)
    assert states["social"] in (0, 1) and states["entertainment"] in (0, 1)


def test_the_shot_encoder_reads_the_action_with_its_adverb(shards):
    from trainer.shared.data import ClipCatalog

    catalog = ClipCatalog([shards])
    captioned = [r for r in catalog.rows if r["motion_description"]]
    assert captioned and all(
        r["action"] == action_text(r["adverb"], r["motion_description"]) for r in captioned
    )
    assert captioned[0]["action"].split()[0].lower() == captioned[0]["adverb"]


# ---- checkpoints that cannot run code -----------------------------------------------------------


class _Payload:
    def __reduce__(self):
        return (print, ("this would have run",))


def test_a_checkpoint_carrying_a_pickled_object_is_refused(tmp_path):
    folder = tmp_path / "step-00000001"
    folder.mkdir()
    torch.save({"phase": "encoder", "config": {}, "step": 1, "x": _Payload()}, folder / "state.pt")
    with pytest.raises(checkpoint.UnsafeCheckpoint, match="refused"):
        checkpoint.load(folder)


def test_checkpoints_hold_only_json_and_safetensors(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    path = checkpoint.save(tmp_path, 1, "encoder", {"lr": 0.1}, model, optimizer, {})
    assert sorted(p.name for p in path.iterdir()) == [
        "extra.safetensors",
        "optimizer.safetensors",
        "state.json",
        "trainable.safetensors",
    ]
    for file in path.iterdir():
        with pytest.raises(pickle.UnpicklingError):
            pickle.loads(file.read_bytes())
    state = checkpoint.load(tmp_path)
    again = torch.optim.AdamW(model.parameters(), lr=0.1)
    again.load_state_dict(state["optimizer"])
    for key, value in optimizer.state_dict()["state"][0].items():
        assert torch.equal(again.state_dict()["state"][0][key], value)


# ---- the levels file play reads ----------------------------------------------------------------


def test_a_run_records_the_levels_file_its_shards_were_labelled_with(backbones, shards, tmp_path):
    import shutil

    from core.shards import ShardConfig, ShardWriter, read_clips
    from stages.motion_levels import MotionLevels, write_levels
    from trainer.shared.data import ClipCatalog, record_motion_levels

    out = Path(shutil.copytree(shards, tmp_path / "data"))  # write_bikes_dataset's, to change
    calibrated = MotionLevels("mine-v1", (1.0, 2.0, 3.0, 4.0), (0.7, 1.5, 2.5, 3.5, 9.0))
    write_levels(calibrated, out / "motion_levels" / "mine-v1.json")
    for film in ("bikes-a", "bikes-b"):
        clips = list(read_clips(out / film / "shards"))
        for clip in clips:
            clip.motion_levels_version = "mine-v1"
        for old in (out / film / "shards").glob("*.parquet"):
            old.unlink()
        with ShardWriter(out / film / "shards", "clips", ShardConfig()) as writer:
            writer.write_all(clips)
    config = tiny_config("mllm", backbones, out / "bikes-a", tmp_path / "run")
    record_motion_levels(config, ClipCatalog(config.shards))
    assert Path(config.motion_levels) == (out / "motion_levels" / "mine-v1.json").resolve()
    assert config.level_scopes == [0.7, 1.5, 2.5, 3.5, 9.0]
    config.motion_levels = "decoder-midpoints-v1"
    with pytest.raises(ValueError, match="labelled with mine-v1"):
        record_motion_levels(config, ClipCatalog(config.shards))


# ---- export ----------------------------------------------------------------------------------


def _mark_unusable(shards: Path, film: str, clip_index: int, out: Path) -> Path:
    """A copy of the dataset with one clip marked not usable (the column is set, or added to
    shards written without it)."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    shutil.copytree(shards, out)
    for path in sorted(out.rglob("clips-*.parquet")):
        table = pq.read_table(path)
        usable = [
            not (f == film and i == clip_index)
            for f, i in zip(
                table.column("film_id").to_pylist(), table.column("clip_index").to_pylist()
            )
        ]
        column = pa.array(usable, pa.bool_())
        if "usable" in table.column_names:
            table = table.set_column(table.column_names.index("usable"), "usable", column)
        else:
            table = table.append_column("usable", column)
        pq.write_table(table.replace_schema_metadata(pq.read_schema(path).metadata), path)
    return out


def _read_like_the_release(tar: Path, meta_names: list[str]) -> list[dict]:
    """Read a tar as the release's MetaDistributedWebDataset does: the tar's members through
    webdataset, the side file `name.split(".")[0] + ".meta.jsonl"` joined on each `.id`, then
    webdataset's grouping by key."""
    from webdataset.tariterators import group_by_keys, tar_file_iterator

    meta = {}
    for line in (tar.parent / (tar.name.split(".")[0] + ".meta.jsonl")).read_text().splitlines():
        item = json.loads(line)
        meta[item["key"]] = {n: item[n] for n in meta_names if n in item}

    def members():
        with tar.open("rb") as stream:
            for member in tar_file_iterator(stream):
                yield {**member, "__url__": str(tar)}
                if member["fname"].endswith(".id"):
                    key = member["fname"].split(".")[0]
                    for name in meta_names:
                        data = meta[key].get(name)
                        yield {"fname": f"{key}.{name}", "data": data, "__url__": str(tar)}

    return list(group_by_keys(members()))


def test_webdataset_export_reads_back_as_the_release_reads_it(shards, tmp_path):
    from core.shards import read_table
    from core.video import decode_mp4
    from trainer.delivery.export import export

    marked = _mark_unusable(shards, "bikes-a", 1, tmp_path / "marked")
    summary = export([str(marked)], tmp_path / "wds", "webdataset", samples_per_tar=3)
    table = read_table(marked).to_pylist()
    ok = [r for r in table if r["status"] == "ok" and r["motion_description"]]
    assert summary["skipped"]["not usable"] == 1
    assert summary["exported"] == len(ok) - 1
    samples = []
    for tar in sorted((tmp_path / "wds").glob("*.tar")):
        samples += _read_like_the_release(tar, ["motion", "caption", "duration"])
    assert len(samples) == summary["exported"]
    by_id = {r["clip_id"]: r for r in table}
    for sample in samples:
        row = by_id[sample["__key__"]]
        assert sample["motion"] == row["motion_scope"] and sample["duration"] == 2.0
        assert sample["txt"].decode() == action_text(row["adverb"], row["motion_description"])
        assert sample["caption"] == row["instruction"]
        assert decode_mp4(sample["mp4"]).shape[0] == 16
        assert "jpg" in sample or "png" in sample
    assert not any(
        by_id[s["__key__"]]["clip_index"] == 1 and by_id[s["__key__"]]["film_id"] == "bikes-a"
        for s in samples
    )
    again = export([str(marked)], tmp_path / "wds2", "webdataset", samples_per_tar=3)
    assert again == summary
    for tar in sorted((tmp_path / "wds").glob("*")):
        assert tar.read_bytes() == (tmp_path / "wds2" / tar.name).read_bytes()


def test_the_trainer_reads_only_usable_clips_unless_told(shards, tmp_path):
    from trainer.shared.data import ClipCatalog, ShotDataset, clip_samples, game_sequences

    marked = _mark_unusable(shards, "bikes-a", 1, tmp_path / "marked")
    plain, usable_only = ClipCatalog([shards]), ClipCatalog([marked])
    everything = ClipCatalog([marked], include_unusable=True)
    assert plain.unusable == 0 and usable_only.unusable == 1
    assert len(clip_samples(usable_only)) == len(clip_samples(plain)) - 1
    assert len(clip_samples(everything)) == len(clip_samples(plain))
    left_out = [
        i
        for i, r in enumerate(usable_only.rows)
        if r["film_id"] == "bikes-a" and r["clip_index"] == 1
    ]
    sequences = game_sequences(usable_only.rows, 4, include_unusable=False)
    assert not any(left_out[0] in seq for seq in sequences)
    dataset = ShotDataset(usable_only, clip_samples(usable_only), (16, 24), 17, with_video=False)
    assert dataset.summary().endswith("(1 clips marked not usable left out)")


def test_cogvideox_export_writes_videos_and_prompt_lines(shards, tmp_path):
    from trainer.delivery.export import export

    summary = export([str(shards)], tmp_path / "cog", "cogvideox")
    videos = (tmp_path / "cog" / "videos.txt").read_text().splitlines()
    prompts = (tmp_path / "cog" / "prompts.txt").read_text().splitlines()
    assert len(videos) == len(prompts) == summary["exported"] > 0
    assert all((tmp_path / "cog" / v).is_file() for v in videos)
    assert all(p.startswith("Character: ") for p in prompts)
    assert summary["skipped"] == {"no motion description or motion scope": 1}  # the uncaptioned


# ---- eval: the paper's metrics ---------------------------------------------------------------


def _tiny_eval_models(folder: Path) -> dict:
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection, ViTConfig, ViTModel

    from trainer.shared.tiny import TINY_CONFIGS, write_tiny_clip

    write_tiny_clip(folder / "clip")
    CLIPVisionModelWithProjection(
        CLIPVisionConfig(**TINY_CONFIGS["clip"], projection_dim=16)
    ).save_pretrained(folder / "ds_clip")
    ViTModel(ViTConfig(**TINY_CONFIGS["clip"])).save_pretrained(folder / "ds_dino")
    return {
        "clip_model": str(folder / "clip"),
        "dreamsim_models": [str(folder / "ds_dino"), str(folder / "ds_clip")],
    }


@pytest.fixture(scope="module")
def eval_models(tmp_path_factory) -> dict:
    """The tiny metric models, written once for the tests that read them."""
    return _tiny_eval_models(tmp_path_factory.mktemp("eval-models"))


def _write_clip(path: Path, frames: np.ndarray) -> None:
    from core.video import encode_mp4

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_mp4(frames, fps=8.0))


def test_eval_scores_identical_clips_at_the_maximum(tmp_path, eval_models):
    from trainer.evaluation.evaluate import EvalConfig, evaluate

    config = EvalConfig(**eval_models, frames=4)
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 255, (16, 48, 72, 3), dtype=np.uint8)
    ramp = np.broadcast_to(
        np.linspace(0, 255, 72, dtype=np.uint8)[None, None, :, None], (16, 48, 72, 3)
    ).copy()
    _write_clip(tmp_path / "gen" / "same.mp4", noise)
    _write_clip(tmp_path / "ref" / "same.mp4", noise)
    _write_clip(tmp_path / "gen" / "other.mp4", noise)
    _write_clip(tmp_path / "ref" / "other.mp4", ramp)
    texts = tmp_path / "texts.json"
    texts.write_text(json.dumps({"same": "a girl riding", "other": "a girl riding"}))
    levels = tmp_path / "levels.json"
    levels.write_text(json.dumps({"same": 5, "other": 1}))
    result = evaluate(config, tmp_path / "gen", tmp_path / "ref", texts, levels)
    assert 0.0 <= result["acc_f"] <= 1.0 and 0.0 <= result["mae_f"] <= 4.0
    assert (result["acc_f"] == 1.0) == (result["mae_f"] == 0.0)
    same, other = result["per_clip"]["same"], result["per_clip"]["other"]
    assert same["clip_i"] == pytest.approx(1.0, abs=1e-5)
    assert same["dreamsim_distance"] == pytest.approx(0.0, abs=1e-5)
    assert same["dreamsim"] == pytest.approx(1.0, abs=1e-5)  # the paper's way: higher is closer
    assert other["clip_i"] < same["clip_i"] - 1e-3 and other["dreamsim_distance"] > 1e-3
    assert other["dreamsim"] == pytest.approx(1.0 - other["dreamsim_distance"])
    assert -1.0 <= same["clip_t"] <= 1.0 and same["clip_t"] == pytest.approx(other["clip_t"])
    assert result["clip_i"] == pytest.approx((same["clip_i"] + other["clip_i"]) / 2)


def test_eval_names_the_setting_of_a_missing_checkpoint(tmp_path, capsys):
    from trainer.evaluation.evaluate import main

    _write_clip(tmp_path / "gen" / "a.mp4", np.zeros((4, 16, 16, 3), np.uint8))
    _write_clip(tmp_path / "ref" / "a.mp4", np.zeros((4, 16, 16, 3), np.uint8))
    code = main(
        [
            str(tmp_path / "gen"),
            "--references",
            str(tmp_path / "ref"),
            "--set",
            f"clip_model={tmp_path}/nowhere",
        ]
    )
    assert code == 2
    assert "clip_model=" in capsys.readouterr().err
    # a hub name is not a way around it: metrics never run on a downloaded model
    code = main(
        [
            str(tmp_path / "gen"),
            "--references",
            str(tmp_path / "ref"),
            "--set",
            "clip_model=openai/clip-vit-large-patch14",
        ]
    )
    assert code == 2
    assert "clip_model=openai/clip-vit-large-patch14" in capsys.readouterr().err


def _play_output(folder: Path, frames_per_turn: list[np.ndarray], instructions: list[str]) -> None:
    """A folder as `animegamer play` writes it: turn-NNN.mp4 and states.jsonl."""
    lines = []
    for turn, (frames, instruction) in enumerate(zip(frames_per_turn, instructions), 1):
        _write_clip(folder / f"turn-{turn:03d}.mp4", frames)
        lines.append(json.dumps({"video": f"turn-{turn:03d}.mp4", "instruction": instruction}))
    (folder / "states.jsonl").write_text("\n".join(lines) + "\n")


def _character_picture() -> np.ndarray:
    ramp = np.linspace(0, 255, 72, dtype=np.uint8)
    picture = np.zeros((48, 72, 3), np.uint8)
    picture[..., 0], picture[..., 2] = ramp[None, :], ramp[::-1][None, :]
    return picture


def _benchmark(tmp_path: Path) -> tuple[Path, Path]:
    """Two games of the benchmark's shape: a reference picture of each game's character, and
    each turn's generated shot (game-a's first turn is its character's picture, held still)."""
    from PIL import Image

    picture = _character_picture()
    noise = np.random.default_rng(1).integers(0, 255, (8, 48, 72, 3), dtype=np.uint8)
    refs = tmp_path / "refs"
    refs.mkdir()
    Image.fromarray(picture).save(refs / "game-a.png")
    Image.fromarray(255 - picture).save(refs / "game-b.jpg")
    riding = "Character: girl; Motion: quickly riding; Background: road."
    walking = "Character: girl; Motion: slowly walking; Background: forest."
    _play_output(
        tmp_path / "gen" / "game-a", [np.repeat(picture[None], 8, 0), noise], [riding, walking]
    )
    _play_output(tmp_path / "gen" / "game-b", [noise], [walking])
    return tmp_path / "gen", refs


def test_eval_compares_each_turn_with_its_games_character_picture(tmp_path, eval_models):
    from trainer.evaluation.evaluate import EvalConfig, evaluate

    generated, refs = _benchmark(tmp_path)
    config = EvalConfig(**eval_models, frames=4)
    result = evaluate(config, generated, refs, texts=None)
    turns = result["per_clip"]
    assert sorted(turns) == ["game-a/turn-001", "game-a/turn-002", "game-b/turn-001"]
    still = turns["game-a/turn-001"]  # the character's own picture: the top of both scales
    assert still["clip_i"] == pytest.approx(1.0, abs=5e-3)
    assert still["dreamsim"] == pytest.approx(1.0, abs=5e-3)
    for values in turns.values():
        assert values["dreamsim"] == pytest.approx(1.0 - values["dreamsim_distance"])
    assert turns["game-a/turn-002"]["dreamsim"] < still["dreamsim"] - 1e-3
    assert result["dreamsim"] == pytest.approx(np.mean([t["dreamsim"] for t in turns.values()]))
    with pytest.raises(FileNotFoundError, match="no reference for game-c/turn-001"):
        (generated / "game-c").mkdir()
        _write_clip(generated / "game-c" / "turn-001.mp4", np.zeros((4, 16, 16, 3), np.uint8))
        evaluate(config, generated, refs)


def test_judge_scores_parse_the_six_criteria():
    from trainer.evaluation.judge import CRITERIA, parse_scores

    answer = (
        "Overall Quality: 7\nText Alignment: 8\nContextual coherence - 6\n"
        "Character Consistency: 9\nEmotional Consistency: 5\nVisual Coherence: 10"
    )
    scores, reason = parse_scores(answer)
    assert reason is None and scores == dict(zip(CRITERIA, (7, 8, 6, 9, 5, 10)))
    assert parse_scores(answer.replace("Visual Coherence: 10", "")) == (
        None,
        "no Visual Coherence score",
    )
    assert (
        parse_scores(answer.replace(": 10", ": 11"))[1] == "Visual Coherence score 11 outside 1-10"
    )


def test_the_judge_sees_five_frames_in_a_row_and_the_games_instructions(tmp_path):
    from trainer.evaluation.evaluate import EvalConfig, clips_by_name, shot_texts
    from trainer.evaluation.judge import judge_requests

    generated, _ = _benchmark(tmp_path)
    config = EvalConfig(judge_frame_height=40)
    shots = clips_by_name(generated)
    requests = {r.key: r for r in judge_requests(config, shots, shot_texts(generated, shots, None))}
    second = requests["game-a/turn-002"]
    (row,) = second.images
    from stages.captioning.images import FRAME_GAP

    # 5 frames of 60 x 40 (the shots' 3:2), side by side in one row
    assert (row.width, row.height) == (5 * 60 + 4 * FRAME_GAP, 40)
    assert "slowly walking" in second.text and "quickly riding" in second.text  # history
    assert "first turn" in requests["game-b/turn-001"].text


def test_eval_runs_the_judge_on_a_local_tiny_internvl(tmp_path, tiny_internvl, capsys):
    from trainer.evaluation.evaluate import EvalConfig, evaluate, main
    from trainer.evaluation.judge import CRITERIA

    generated, _ = _benchmark(tmp_path)
    config = EvalConfig(
        judge_model=str(tiny_internvl), device="cpu", judge_frame_height=28, judge_max_new_tokens=8
    )
    result = evaluate(config, generated, judge=True)
    turns = result["per_clip"]
    assert len(turns) == 3 and all(t["judge_answer"] for t in turns.values())
    # random weights answer nonsense: every turn is counted, scored or with the reason it is not
    assert result["judge_scored"] + sum(result["judge_unscored"].values()) == 3
    assert set(result["judge"]) in (set(), set(CRITERIA))
    assert main([str(generated), "--judge"]) == 2  # one line naming the setting
    assert "judge_model is not set" in capsys.readouterr().err
    with pytest.raises(ValueError, match="judge_model=.*nowhere"):
        evaluate(EvalConfig(judge_model=str(tmp_path / "nowhere")), generated, judge=True)
    with pytest.raises(ValueError, match="local InternVL"):
        evaluate(
            EvalConfig(judge_model=str(tiny_internvl), judge_engine="openai"), generated, judge=True
        )
