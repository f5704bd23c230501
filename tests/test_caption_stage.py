"""The caption stage and film captioning, driven by a scripted engine that answers from the
pictures it is shown and returns its answers shuffled."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from captioning import (
    ADVERB_BY_LEVEL,
    ScriptedEngine,
    answer_well,
    good_character_answer,
    image_word,
    make_clips,
    read_raw,
)
from conftest import SINTEL_REFERENCES

from core.film import CAPTION_CACHE_FILE
from core.record import STATUS_ERROR
from core.shards import read_clips, read_table
from pipeline.data.config import PipelineConfig
from pipeline.passes.caption_films import caption_film
from stages.captioning.engines import EngineError
from stages.captioning.images import build_reference_sheet, clip_frame_grid
from stages.captioning.stage import CaptionConfig, CaptionStage

CONFIG = CaptionConfig(model="scripted-internvl", num_frames=8, frame_height=96, max_retries=2)


def stage_with(answer, protagonists=SINTEL_REFERENCES, config=CONFIG, seed=0):
    engine = ScriptedEngine(answer, seed=seed)
    return CaptionStage(config, protagonists, engine=engine), engine


def expected_subject(clip, config=CONFIG) -> str:
    return image_word(
        clip_frame_grid(clip.video, config.num_frames, config.frame_height, config.grid_columns)
    )


@pytest.mark.slow
def test_valid_answers_fill_typed_columns_bound_to_their_own_clips(clip_videos):
    clips = make_clips(clip_videos)
    for seed in range(3):  # three different completion orders
        stage, engine = stage_with(answer_well, seed=seed)
        done = stage.process_batch([replace(c) for c in clips])
        for clip in done:
            assert clip.caption_status == "ok"
            assert clip.subject == expected_subject(clip)  # the answer made from ITS frames
            assert clip.adverb == ADVERB_BY_LEVEL[clip.motion_level]  # ITS motion level
            assert clip.characters == ["Sintel"] and clip.num_characters == 1
            assert (clip.social, clip.entertainment, clip.stamina) == (0, 1, -1)
            assert clip.instruction == (
                f"Character: Sintel; Motion: {clip.adverb} rides a bike; Background: street."
            )
            assert clip.caption_model == "scripted-internvl"
            assert clip.prompt_version == stage.prompt_version
            assert (
                read_raw(clip)["state"] == f"<S>{clip.subject}</S><MD>rides a bike</MD>"
                f"<EV>street</EV><MA>{clip.adverb}</MA><SC>0</SC><ET>1</ET><ST>-1</ST>"
            )
        assert len(engine.requests) == 2 * len(clips)  # both prompts per clip, nothing retried


def test_prompts_carry_the_sheet_the_grid_and_the_level(clip_videos):
    clip = make_clips(clip_videos)[2]
    stage, engine = stage_with(answer_well)
    stage.process(clip)
    character, state = sorted(engine.requests, key=lambda r: r.key)
    sheet = build_reference_sheet(SINTEL_REFERENCES).image
    grid = clip_frame_grid(clip.video, 8, 96, 4)
    assert character.images[0].tobytes() == sheet.tobytes()
    assert character.images[1].tobytes() == grid.tobytes() == state.images[0].tobytes()
    assert "Image-2 (8 frames from a anime video)" in character.text
    assert f"movement level <ML>{clip.motion_level}</ML> respectively" in state.text
    assert stage.prompt_version.startswith("character_match@paper-v1#")
    assert "+game_state@paper-v1#" in stage.prompt_version


def test_invalid_answers_are_retried_with_sampling_then_accepted(clip_videos):
    bad_first = {"[Num]": "I see a person on a bike.", "<ML>": "<S>man</S><SC>0</SC>"}

    def answer(request, attempt):
        if attempt == 0:
            return bad_first["[Num]" if "[Num]" in request.text else "<ML>"]
        return answer_well(request, attempt)

    stage, engine = stage_with(answer)
    clips = stage.process_batch(make_clips(clip_videos)[:2])
    assert [c.caption_status for c in clips] == ["ok", "ok"]
    retries = [r for r in engine.requests if not r.key.endswith("/0")]
    assert len(retries) == 4 and all(r.temperature == CONFIG.retry_temperature for r in retries)
    assert all(r.temperature == 0.0 for r in engine.requests if r.key.endswith("/0"))
    raw = read_raw(clips[0])
    assert raw["attempts"] == {"characters": 2, "state": 2}
    assert "missing tags" in raw["problems"]["state"][0]
    assert stage.stats["retried_requests"] == 4


@pytest.mark.parametrize(
    "bad_state",
    [
        "",  # empty
        "<S>Girl</S><MD>run</MD><EV>Forest</EV>",  # partial
        "<S>Girl</S><MD>run</MD><EV>Forest</EV><MA>slowly</MA><SC>0</SC><ET>1</ET><ST>5</ST>",
        "I'm sorry, I can't help with that.",  # chatter only
    ],
)
def test_answers_invalid_after_all_retries_are_caption_failed_with_raw_kept(clip_videos, bad_state):
    def answer(request, attempt):
        return good_character_answer(request) if "[Num]" in request.text else bad_state

    stage, engine = stage_with(answer)
    [clip] = stage.process_batch(make_clips(clip_videos)[:1])
    assert clip.caption_status == "caption_failed"
    assert (clip.subject, clip.stamina, clip.instruction, clip.characters) == (
        None,
        None,
        None,
        None,
    )
    raw = read_raw(clip)
    assert raw["state"] == bad_state and raw["characters"] == "[Number]1[Index]1"
    assert raw["attempts"]["state"] == 1 + CONFIG.max_retries
    assert len(raw["problems"]["state"]) == 1 + CONFIG.max_retries
    assert len(engine.requests) == 1 + (1 + CONFIG.max_retries)  # the valid one is not re-asked


def test_engine_errors_count_as_failed_attempts(clip_videos):
    def answer(request, attempt):
        return RuntimeError("HTTP 500") if attempt == 0 else answer_well(request, attempt)

    stage, _ = stage_with(answer)
    [clip] = stage.process_batch(make_clips(clip_videos)[:1])
    assert clip.caption_status == "ok"
    assert read_raw(clip)["problems"]["state"] == ["engine error: HTTP 500"]


def test_an_engine_failing_everything_stops_the_run(clip_videos):
    stage, _ = stage_with(
        lambda request, attempt: RuntimeError("connection refused"),
        config=replace(CONFIG, max_retries=10),
    )
    with pytest.raises(EngineError, match="failed on 24 requests in a row.*connection refused"):
        stage.process_batch(make_clips(clip_videos))


def test_an_answer_to_an_unknown_request_stops_rather_than_misbinds(clip_videos):
    class Misbinding(ScriptedEngine):
        def generate(self, requests):
            completions = super().generate(requests)
            return [replace(c, key=c.key + "x") if i == 0 else c for i, c in enumerate(completions)]

    stage = CaptionStage(CONFIG, SINTEL_REFERENCES, engine=Misbinding(answer_well))
    with pytest.raises(EngineError, match="unknown request"):
        stage.process_batch(make_clips(clip_videos)[:2])


def test_an_answer_the_engine_lost_is_asked_again_not_dropped(clip_videos):
    class LosesOne(ScriptedEngine):
        def generate(self, requests):
            completions = super().generate(requests)
            return (
                [c for c in completions if c.key != lost]
                if len(self.requests) <= 4
                else completions
            )

    clips = make_clips(clip_videos)[:2]
    lost = f"{clips[1].clip_id}/state/0"
    stage = CaptionStage(CONFIG, SINTEL_REFERENCES, engine=LosesOne(answer_well))
    done = stage.process_batch(clips)
    assert [c.caption_status for c in done] == ["ok", "ok"]
    assert read_raw(done[1])["problems"] == {"state": ["no answer from the engine"]}
    assert "problems" not in read_raw(done[0])


def test_clips_that_cannot_be_captioned_are_skipped_with_a_reason(clip_videos):
    clips = make_clips(clip_videos)[:3]
    clips[0].status = STATUS_ERROR
    clips[1].motion_level = None
    clips[2].video = None
    stage, engine = stage_with(answer_well)
    assert [c.caption_status for c in stage.process_batch(clips)] == [
        "skipped_clip_error",
        "skipped_no_motion_level",
        "skipped_no_video",
    ]
    assert engine.requests == []


def test_an_undecodable_video_is_skipped_alone_with_the_decoder_error(clip_videos):
    clips = make_clips(clip_videos)[:2]
    clips[0].video = b"not an mp4"
    stage, _ = stage_with(answer_well)
    done = stage.process_batch(clips)
    assert [c.caption_status for c in done] == ["skipped_bad_video", "ok"]
    assert read_raw(done[0])["problems"]["video"][0].startswith("InvalidDataError")


def test_a_failed_recaption_keeps_no_values_of_the_earlier_caption(clip_videos):
    [clip] = stage_with(answer_well)[0].process_batch(make_clips(clip_videos)[:1])
    assert clip.caption_status == "ok" and clip.subject
    [clip] = stage_with(lambda request, attempt: "no")[0].process_batch([clip])
    assert clip.caption_status == "caption_failed"
    assert all(
        getattr(clip, name) is None
        for name in (
            "characters",
            "num_characters",
            "subject",
            "motion_description",
            "environment",
            "adverb",
            "social",
            "entertainment",
            "stamina",
            "instruction",
        )
    )


def test_without_protagonists_the_subject_names_the_character(clip_videos):
    stage, engine = stage_with(answer_well, protagonists=None)
    [clip] = stage.process_batch(make_clips(clip_videos)[:1])
    assert clip.caption_status == "ok"
    assert clip.characters is None and clip.num_characters is None
    assert clip.instruction.startswith(f"Character: {clip.subject}; ")
    assert all("[Num]" not in r.text for r in engine.requests)
    assert stage.prompt_version.startswith("game_state@")


def test_without_a_model_captions_are_pending_and_nothing_loads(clip_videos):
    stage, engine = stage_with(answer_well, config=CaptionConfig())
    clips = stage.process_batch(make_clips(clip_videos)[:2])
    assert [c.caption_status for c in clips] == ["pending", "pending"]
    assert engine.loads == 0 and engine.requests == []


# ---- a film folder -------------------------------------------------------------------------


def caption_columns(film_dir):
    return read_table(
        film_dir / "shards",
        columns=["clip_id", "caption_status", "subject", "instruction", "prompt_version"],
    ).to_pylist()


@pytest.mark.slow
def test_caption_film_rewrites_shards_manifest_and_summary(film):
    before = {p.name: pq.read_table(p).num_rows for p in (film / "shards").glob("*.parquet")}
    config = PipelineConfig()
    config.caption = CONFIG
    summary = caption_film(film, config, SINTEL_REFERENCES, engine=ScriptedEngine(answer_well))
    after = {p.name: pq.read_table(p).num_rows for p in (film / "shards").glob("*.parquet")}
    assert after == before  # same files, same rows, nothing left aside
    assert not (film / "shards" / ".caption-rewrite").exists()
    clips = list(read_clips(film / "shards"))
    assert all(c.caption_status == "ok" and c.subject == expected_subject(c) for c in clips)
    assert all(c.video for c in clips)  # the media survived the rewrite
    manifest = pq.read_table(film / "manifest.parquet")
    assert "video" not in manifest.column_names
    assert manifest.column("instruction").to_pylist() == [c.instruction for c in clips]
    written = json.loads((film / "summary.json").read_text())
    assert written["clips_written"] == 5  # the pipeline's own keys are kept
    assert written["captions"] == "complete"
    assert written["caption"] == summary.to_dict()
    assert summary.by_status == {"ok": 5} and summary.sent_to_model == 5
    assert summary.requests == 10 and summary.protagonists == ["Sintel", "Scales"]


@pytest.mark.slow
def test_rerun_takes_captions_from_the_cache_and_a_changed_prompt_recaptions(film, tmp_path):
    first = ScriptedEngine(answer_well)
    caption_film(film, CONFIG, SINTEL_REFERENCES, engine=first)
    captioned = caption_columns(film)

    again = ScriptedEngine(lambda request, attempt: pytest.fail("a cached clip was sent again"))
    summary = caption_film(film, CONFIG, SINTEL_REFERENCES, engine=again)
    assert again.requests == [] and summary.from_cache == 5
    assert caption_columns(film) == captioned

    changed = tmp_path / "game_state_v2.txt"
    from prompts import load_prompt

    text = load_prompt("game_state")
    changed.write_text(f"# name: game_state\n# version: v2\n---\n{text.text} Be brief.\n")
    recaption = ScriptedEngine(answer_well)
    summary = caption_film(
        film, replace(CONFIG, state_prompt=str(changed)), SINTEL_REFERENCES, engine=recaption
    )
    assert summary.from_cache == 0 and summary.sent_to_model == 5
    assert {r["prompt_version"].split("+")[1].split("#")[0] for r in caption_columns(film)} == {
        "game_state@v2"
    }

    other_model = ScriptedEngine(answer_well)
    summary = caption_film(
        film, replace(CONFIG, model="another-internvl"), SINTEL_REFERENCES, engine=other_model
    )
    assert summary.sent_to_model == 5 and len(other_model.requests) == 10


@pytest.mark.slow
def test_failed_clips_are_not_cached_and_are_retried_on_the_next_run(film):
    def state_fails_for_level_3(request, attempt):
        if "<ML>3</ML>" in request.text:
            return "no idea"
        return answer_well(request, attempt)

    summary = caption_film(
        film, CONFIG, SINTEL_REFERENCES, engine=ScriptedEngine(state_fails_for_level_3)
    )
    assert summary.by_status == {"caption_failed": 1, "ok": 4}
    assert json.loads((film / "summary.json").read_text())["captions"] == "incomplete"
    failed = [c for c in read_clips(film / "shards") if c.caption_status == "caption_failed"]
    assert read_raw(failed[0])["state"] == "no idea" and failed[0].motion_level == 3

    summary = caption_film(film, CONFIG, SINTEL_REFERENCES, engine=ScriptedEngine(answer_well))
    assert summary.by_status == {"ok": 5}
    assert summary.from_cache == 4 and summary.sent_to_model == 1


@pytest.mark.slow
def test_an_interrupted_run_keeps_finished_batches_in_the_cache(film):
    calls = []

    def dies_on_second_batch(request, attempt):
        calls.append(request.key)
        if len(calls) > 4:  # batches of 2 clips x 2 prompts: the second batch dies
            raise KeyboardInterrupt
        return answer_well(request, attempt)

    config = replace(CONFIG, batch_size=2)
    before = [c.to_row() for c in read_clips(film / "shards")]
    with pytest.raises(KeyboardInterrupt):
        caption_film(film, config, SINTEL_REFERENCES, engine=ScriptedEngine(dies_on_second_batch))
    assert len((film / CAPTION_CACHE_FILE).read_text().splitlines()) == 2
    assert [c.to_row() for c in read_clips(film / "shards")] == before  # shards untouched
    summary = caption_film(film, config, SINTEL_REFERENCES, engine=ScriptedEngine(answer_well))
    assert summary.from_cache == 2 and summary.by_status == {"ok": 5}


@pytest.mark.slow
def test_a_torn_cache_line_is_skipped_and_counted(film):
    caption_film(film, CONFIG, SINTEL_REFERENCES, engine=ScriptedEngine(answer_well))
    cache = film / CAPTION_CACHE_FILE
    lines = cache.read_text().splitlines()
    cache.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:40])  # a crash mid-line
    summary = caption_film(film, CONFIG, SINTEL_REFERENCES, engine=ScriptedEngine(answer_well))
    assert summary.cache_unreadable_lines == 1
    assert summary.from_cache == 4 and summary.sent_to_model == 1


def test_without_a_model_the_film_is_marked_pending_with_a_hint(film):
    summary = caption_film(film, CaptionConfig(), None)
    assert summary.by_status == {"pending": 5} and summary.pending == 5
    assert "animegamer caption" in summary.hint and "make caption FILM=" in summary.hint
    assert json.loads((film / "summary.json").read_text())["captions"] == "pending"
    assert set(pq.read_table(film / "manifest.parquet").column("caption_status").to_pylist()) == {
        "pending"
    }


@pytest.mark.slow
def test_several_films_share_one_loaded_model_and_count_separately(film, tmp_path):
    import shutil

    from pipeline.passes.caption_films import caption_films

    other = tmp_path / "other"
    shutil.copytree(film, other)
    engine = ScriptedEngine(answer_well)
    first, second = caption_films([film, other], CONFIG, SINTEL_REFERENCES, engine=engine)
    assert engine.loads == 1
    assert first.requests == second.requests == 10
    assert first.by_status == second.by_status == {"ok": 5}
    assert json.loads((other / "summary.json").read_text())["caption"] == second.to_dict()


def test_a_film_named_twice_is_captioned_once_and_each_input_gets_its_summary(film, tmp_path):
    import shutil

    from pipeline.passes.caption_films import caption_films

    other = tmp_path / "other"
    shutil.copytree(film, other)
    summaries = caption_films(
        [film, other, film], CONFIG, SINTEL_REFERENCES, engine=ScriptedEngine(answer_well)
    )
    assert len(summaries) == 3 and summaries[0] is summaries[2]
    assert summaries[0].by_status == summaries[1].by_status == {"ok": 5}
    assert summaries[0].sent_to_model == 5  # not sent a second time


def test_an_empty_shard_is_left_alone(film):
    from core.io import write_table_atomic
    from core.schema import CLIP_SCHEMA

    write_table_atomic(CLIP_SCHEMA.empty_table(), film / "shards" / "clips-09999.parquet")
    summary = caption_film(film, CONFIG, SINTEL_REFERENCES, engine=ScriptedEngine(answer_well))
    assert summary.by_status == {"ok": 5}
    assert (film / "shards" / "clips-09999.parquet").is_file()


def test_the_stage_hands_its_counts_to_the_executor_once(clip_videos):
    """The declared stats hook: what the caption pass sums per film, reset at each call."""
    from pipeline.executors.local import LocalStageRunner

    stage, _ = stage_with(answer_well)
    runner = LocalStageRunner(stage)
    [(_, done)] = list(runner.map([make_clips(clip_videos)[:2]]))
    assert [clip.caption_status for clip in done] == ["ok", "ok"]
    taken = runner.take_stats()
    assert taken["ok"] == 2 and taken["requests"] == 4
    assert runner.take_stats() == {}


def test_the_caption_later_hint_pastes_as_one_argument_per_path():
    """A film folder named after its film holds spaces and quotes: both commands of the hint
    must give the shell the folder as one argument."""
    import shlex

    from pipeline.passes.caption_films import caption_later_hint

    folder = Path("/data/Kiki's Delivery Service (1989)-1a2b")
    hint = caption_later_hint(folder)
    make, animegamer = [part for part in hint.split("`")[1::2]]
    assert f"FILM={folder}" in shlex.split(make)
    assert shlex.split(animegamer)[:3] == ["animegamer", "caption", str(folder)]
