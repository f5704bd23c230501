"""The trainer's data side: shards -> clips -> game sequences -> batches, prompts and masks,
and its configuration. Shards are written from real frames of tests/media/bikes.mp4."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import trainer  # noqa: F401  (makes torchvision importable before transformers)
from trainer.shared.config import ConfigError, load_config
from trainer.shared.data import (
    ClipCatalog,
    ShotDataset,
    StepBatches,
    captioned_runs,
    clip_samples,
    game_sequences,
)
from trainer.shared.prompt import (
    IGNORE,
    PromptBuilder,
    add_game_tokens,
    attention_allowed,
    pad_batch,
    parse_states,
    state_text,
)

CONFIGS = Path(__file__).parent.parent / "trainer" / "configs"


@pytest.fixture(scope="module")
def catalog(shards) -> ClipCatalog:
    return ClipCatalog([shards])  # write_bikes_dataset's, built once a run


def _key(catalog, index):
    row = catalog.rows[index]
    return row["film_id"], row["clip_index"]


def test_catalog_reads_every_clip_and_its_media(catalog):
    assert len(catalog) == 10  # 2 films x 5 clips of 2 s
    assert {r["film_id"] for r in catalog.rows} == {"bikes-a", "bikes-b"}
    from core.video import decode_mp4

    frames = decode_mp4(catalog.media_bytes(3, "video"))
    assert frames.shape == (16, 96, 144, 3)


def test_runs_keep_time_order_and_film_boundaries_and_skip_uncaptioned(catalog):
    runs = [[_key(catalog, i) for i in run] for run in captioned_runs(catalog.rows)]
    # bikes-a clip 2 has no caption: its film splits in two runs around it
    assert runs == [
        [("bikes-a", 0), ("bikes-a", 1)],
        [("bikes-a", 3), ("bikes-a", 4)],
        [("bikes-b", i) for i in range(5)],
    ]


def test_game_sequences_end_at_their_target_with_the_history_before_it(catalog):
    sequences = game_sequences(catalog.rows, max_turns=3)
    keys = [[_key(catalog, i) for i in seq] for seq in sequences]
    assert len(keys) == 9  # one per captioned clip
    for seq in keys:
        film, last = seq[-1]
        assert all(f == film for f, _ in seq)
        assert [i for _, i in seq] == list(range(last - len(seq) + 1, last + 1))
        assert 1 <= len(seq) <= 3
    assert [("bikes-b", 2), ("bikes-b", 3), ("bikes-b", 4)] in keys
    assert [("bikes-a", 3)] in keys  # the run restarts after the gap: no history across it
    with pytest.raises(ValueError):
        game_sequences(catalog.rows, max_turns=0)


def test_samples_carry_frames_first_frame_motion_and_states(catalog):
    dataset = ShotDataset(catalog, game_sequences(catalog.rows, 2), (32, 48), 17, with_video=True)
    sample = dataset[(1, 7)]
    video, turns = sample["video"], sample["turns"]
    assert sample["uid"] == 7 and video.shape == (17, 3, 32, 48) and video.dtype == torch.uint8
    assert torch.equal(video[16], video[15])  # 16 frames -> 17 by repeating the last
    assert len(turns) == 2 and turns[0]["clip_index"] + 1 == turns[1]["clip_index"]
    target = turns[-1]
    assert target["first_frame"].shape == (3, 32, 48)
    # the JPEG first frame and the video's first frame are the same picture
    assert (target["first_frame"].float() - video[0].float()).abs().mean() < 12
    assert target["instruction"].startswith("Character: ") and 1 <= target["motion_level"] <= 5
    assert (
        target["stamina"] in (-1, 1)
        and target["social"] in (0, 1)
        and target["entertainment"] in (0, 1)
    )
    assert len(clip_samples(catalog)) == 9


def test_no_usable_clip_is_an_error_naming_the_shards(catalog):
    with pytest.raises(ValueError, match="shards.*no training samples"):
        ShotDataset(catalog, [], (16, 24), 17, with_video=False)


def test_instruction_is_composed_from_caption_fields_when_missing():
    from trainer.shared.data import instruction_of

    row = {
        "instruction": None,
        "characters": ["Qiqi"],
        "subject": "girl",
        "adverb": "quickly",
        "motion_description": "flying on broomstick",
        "environment": "sky",
    }
    assert (
        instruction_of(row)
        == "Character: Qiqi; Motion: quickly flying on broomstick; Background: sky."
    )
    assert instruction_of({**row, "characters": []}).startswith("Character: girl;")
    assert instruction_of({**row, "environment": None}) is None
    assert instruction_of(
        {**row, "instruction": "Character: a; Motion: b; Background: c."}
    ).endswith("c.")


def test_batches_split_ranks_disjointly_and_restart_exactly():
    single = StepBatches(11, batch_size=4, seed=3)
    ranks = [StepBatches(11, batch_size=2, seed=3, rank=r, world_size=2) for r in (0, 1)]
    for step in range(7):
        together = single.batch_for_step(step)
        assert ranks[0].batch_for_step(step) + ranks[1].batch_for_step(step) == together
    epoch = [
        index for step in range(single.steps_per_epoch) for index, _ in single.batch_for_step(step)
    ]
    assert set(epoch) == set(range(11))  # an epoch sees every sample (padding repeats a few)
    uids = [uid for step in range(6) for _, uid in single.batch_for_step(step)]
    assert len(set(uids)) == len(uids)
    resumed = iter(StepBatches(11, batch_size=4, seed=3, start_step=4))
    assert [next(resumed) for _ in range(3)] == [single.batch_for_step(s) for s in (4, 5, 6)]


@pytest.mark.slow
def test_loader_workers_share_out_whole_batches_in_step_order(catalog):
    from trainer.shared.data import make_loader

    dataset = ShotDataset(catalog, game_sequences(catalog.rows, 2), (16, 24), 17, with_video=False)
    keys = []
    for workers in (0, 2):
        loader = make_loader(
            dataset, batch_size=2, seed=1, rank=1, world_size=2, start_step=3, num_workers=workers
        )
        batches = [batch for _, batch in zip(range(4), loader)]
        keys.append([[t[-1]["clip_id"] for t in b["turns"]] + b["uid"].tolist() for b in batches])
    assert keys[0] == keys[1]
    expected = StepBatches(len(dataset), 2, 1, rank=1, world_size=2)
    assert [k[2:] for k in keys[0]] == [
        [uid for _, uid in expected.batch_for_step(s)] for s in range(3, 7)
    ]


@pytest.fixture(scope="module")
def prompts() -> PromptBuilder:
    from trainer.shared.tiny import mistral_tokenizer

    tokenizer = mistral_tokenizer()
    add_game_tokens(tokenizer, num_queries=5)
    return PromptBuilder(tokenizer, num_queries=5)


def _turn(k: int) -> dict:
    return {
        "instruction": f"Character: girl; Motion: riding {k}; Background: road.",
        "motion_level": k,
        "stamina": -1,
        "social": 1,
        "entertainment": 0,
    }


def test_prompt_puts_slots_in_order_and_labels_only_the_target_states(prompts):
    seq = prompts.sequence([_turn(1), _turn(2), _turn(3)])
    tokens = prompts.tokenizer.convert_ids_to_tokens(seq.input_ids)
    assert (
        len(seq.history_slots) == 2
        and seq.history_slots[0] < seq.history_slots[1] < seq.query_start
    )
    for start in seq.history_slots + [seq.query_start]:
        assert tokens[start : start + 5] == [f"<ANIME_{i}>" for i in range(5)]
        assert tokens[start - 1] == "<VS>" and tokens[start + 5] == "</VS>"
    labelled = [t for t in seq.labels if t != IGNORE]
    assert labelled == prompts.ids(state_text(_turn(3))) + [prompts.eos]
    assert seq.labels.index(labelled[0]) > seq.query_start + 5
    assert parse_states(prompts.tokenizer.decode(labelled)) == {
        k: _turn(3)[k] for k in parse_states("")
    }
    unlabelled = prompts.sequence([_turn(1), _turn(2)], target_states=False)
    assert all(t == IGNORE for t in unlabelled.labels)
    assert len(unlabelled.input_ids) == unlabelled.query_start + 5 + 1  # ends with </VS>


def test_attention_is_causal_except_inside_the_query_block(prompts):
    long, short = prompts.sequence([_turn(1), _turn(2)]), prompts.sequence([_turn(4)])
    ids, _, lengths = pad_batch([long, short], pad_id=0)
    allowed = attention_allowed(lengths, [long.query_start, short.query_start], 5, ids.shape[1])
    q = long.query_start
    block = allowed[0, q : q + 5, q : q + 5]
    assert block.all()  # every query sees every other query, also later ones
    outside = allowed[0].clone()
    outside[q : q + 5, q : q + 5] = False
    assert not torch.triu(outside, diagonal=1).any()  # elsewhere nothing sees the future
    assert allowed[0, q + 5, : q + 5].all()  # the states after the block see the whole history
    assert not allowed[0, q - 1, q : q + 5].any()  # the history never sees the queries
    n = int(lengths[1])
    assert not allowed[1, :n, n:].any()  # padding is never attended to
    assert allowed[1, n:, n:].diagonal().all()


def test_phase_defaults_are_the_papers():
    encoder, mllm, adapt = (load_config(p) for p in ("encoder", "mllm", "adapt"))
    assert (encoder.lr, encoder.encoder_warmup_steps, encoder.max_steps) == (2e-4, 10_000, 90_000)
    assert (encoder.decoder_lora_rank, encoder.motion_hidden, encoder.text_tokens) == (64, 512, 30)
    assert (mllm.lr, mllm.max_steps, mllm.lora_rank, mllm.lora_alpha, mllm.lora_dropout) == (
        5e-5,
        15_000,
        32,
        32,
        0.05,
    )
    assert (mllm.mse_weight, mllm.cosine_weight) == (1.0, 0.0)  # the main recipe
    assert (adapt.lr, adapt.max_steps) == (5e-5, 10_000)
    shipped = {
        name: load_config(phase, Path(__file__).parent.parent / f"trainer/configs/{name}.yaml")
        for phase, name in (("mllm", "mllm"), ("mllm", "mllm-cosine-ablation"))
    }
    assert (shipped["mllm"].mse_weight, shipped["mllm"].cosine_weight) == (1.0, 0.0)
    ablation = shipped["mllm-cosine-ablation"]
    assert (ablation.mse_weight, ablation.cosine_weight) == (0.5, 0.5)


def test_config_layers_yaml_then_set_and_rejects_unknown_names(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "lr: 1e-3\nmax_steps: 7\nmllm:\n  max_turns: 2\nencoder:\n  encoder_warmup_steps: 3\n"
    )
    mllm = load_config("mllm", path, ["max_steps=9"])
    assert (mllm.lr, mllm.max_steps, mllm.max_turns) == (1e-3, 9, 2)
    assert load_config("encoder", path).encoder_warmup_steps == 3
    path.write_text("learning_rate: 1\n")
    with pytest.raises(ConfigError, match="run.yaml.*learning_rate"):
        load_config("mllm", path)
    with pytest.raises(ConfigError, match="max_steps"):
        load_config("mllm", None, ["max_steps=many"])


@pytest.mark.parametrize(
    "name,phase",
    [
        ("encoder.yaml", "encoder"),
        ("mllm.yaml", "mllm"),
        ("adapt.yaml", "adapt"),
        ("tiny.yaml", "encoder"),
        ("tiny.yaml", "mllm"),
        ("tiny.yaml", "adapt"),
    ],
)
def test_shipped_configs_load(name, phase):
    config = load_config(phase, CONFIGS / name)
    assert config.max_steps > 0 and config.cogvideox_model


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    from trainer.shared.backbones import MissingCheckpoint, resolve

    with pytest.raises(MissingCheckpoint, match="mistral_model=.*nowhere.*docs/training.md"):
        resolve("mistral_model", str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(MissingCheckpoint, match="lacks config.json"):
        resolve("clip_model", str(tmp_path / "empty"))


def test_animegamer_train_and_play_are_wired_into_the_console_script(capsys):
    from pipeline.cli import main

    assert main(["train", "--phase", "mllm", "--settings"]) == 0
    listing = capsys.readouterr().out
    assert "lora_rank = 32" in listing and "encoder_checkpoint = " in listing
    with pytest.raises(SystemExit):
        main(["play", "--help"])
    assert "--instructions" in capsys.readouterr().out


def test_a_film_named_twice_is_read_once(catalog):
    """`--shards data data/<film>` names the same shards twice: each clip is read once."""
    roots = [Path(source) for source in catalog.sources]
    films = [p for root in roots for p in root.rglob("shards")]
    twice = ClipCatalog(roots + [films[0].parent])
    assert len(twice) == len(catalog) > 0


def test_a_checkpoint_missing_trainable_weights_is_refused():
    import torch

    from trainer.shared.checkpoint import restore_trainable

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    saved = {"0.weight": torch.zeros(2, 2), "0.bias": torch.zeros(2)}  # layer 1 is left out
    with pytest.raises(ValueError, match="has no weights for"):
        restore_trainable(model, saved, source="old-run")
    model[1].requires_grad_(False)  # frozen weights need not be in it
    assert restore_trainable(model, saved, source="old-run") == 2
