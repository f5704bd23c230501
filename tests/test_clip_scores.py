"""The CLIP scores (issue 36): a tiny random CLIP built from a config, an aesthetic head of the
LAION layout with random weights, the whole path through a real cut and a caption pass, and the
folder's semantic duplicate pass on planted embeddings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from captioning import ScriptedEngine, answer_well
from conftest import BIKES, local_config, nudged, unit_rows, write_embedded_film

from core.settings import ConfigError
from core.shards import read_clips
from stages.base import build_clip_stages, clip_schema
from stages.scoring.aesthetic import AestheticHeadError, load_head
from stages.scoring.clip_scores import CLIP_SCORE_COLUMNS, ClipScoreConfig

DIM = 16  # the tiny CLIP's projection


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory) -> Path:
    from trainer.shared.tiny import write_tiny_clip

    return write_tiny_clip(tmp_path_factory.mktemp("clip") / "clip", projection_dim=DIM)


def laion_mlp(size: int = DIM) -> torch.nn.Module:
    """The improved aesthetic predictor's layout (Linear, Dropout, ... Linear 16->1 under
    `layers`), random weights, for `size` inputs instead of ViT-L/14's 768."""
    torch.manual_seed(1)
    module = torch.nn.Module()
    module.layers = torch.nn.Sequential(
        torch.nn.Linear(size, 1024),
        torch.nn.Dropout(0.2),
        torch.nn.Linear(1024, 128),
        torch.nn.Dropout(0.2),
        torch.nn.Linear(128, 64),
        torch.nn.Dropout(0.1),
        torch.nn.Linear(64, 16),
        torch.nn.Linear(16, 1),
    )
    return module.eval()


@pytest.fixture(scope="module")
def head_file(tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    module = laion_mlp()
    path = tmp_path_factory.mktemp("head") / "sac+logos+ava1-l14-linearMSE.pth"
    torch.save(module.state_dict(), path)
    return path, module


# ---------------------------------------------------------------- the aesthetic head


def test_the_mlp_head_scores_as_the_torch_module_it_was_saved_from(head_file):
    path, module = head_file
    embeddings = np.random.default_rng(0).normal(size=(5, DIM)).astype(np.float32)
    head = load_head("clip_scores.aesthetic_head", path)
    with torch.no_grad():
        expected = module.layers(torch.from_numpy(embeddings))[:, 0].numpy()
    assert sorted(dict(module.state_dict())) == [
        f"layers.{i}.{p}" for i in (0, 2, 4, 6, 7) for p in ("bias", "weight")
    ]
    np.testing.assert_allclose(head(embeddings), expected, rtol=1e-4, atol=1e-5)


def test_the_linear_head_and_the_relu_variant_score_as_torch(tmp_path):
    torch.manual_seed(2)
    linear = torch.nn.Linear(DIM, 1)
    torch.save(linear.state_dict(), tmp_path / "linear.pth")
    x = np.random.default_rng(1).normal(size=(3, DIM)).astype(np.float32)
    with torch.no_grad():
        expected = linear(torch.from_numpy(x))[:, 0].numpy()
    np.testing.assert_allclose(load_head("h", tmp_path / "linear.pth")(x), expected, rtol=1e-5)
    relu = torch.nn.Module()
    relu.layers = torch.nn.Sequential(
        torch.nn.Linear(DIM, 8), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(8, 1)
    ).eval()
    torch.save(relu.state_dict(), tmp_path / "relu.pth")
    with torch.no_grad():
        expected = relu.layers(torch.from_numpy(x))[:, 0].numpy()
    got = load_head("h", tmp_path / "relu.pth", activation="relu")(x)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "state, problem",
    [
        ({"fc.weight": torch.zeros(1, DIM)}, "unexpected key 'fc.weight'"),
        ({"layers.0.weight": torch.zeros(4, DIM)}, "layer 0 is not a Linear layer"),
        (
            {
                "layers.0.weight": torch.zeros(4, DIM),
                "layers.0.bias": torch.zeros(4),
                "layers.2.weight": torch.zeros(1, 5),
                "layers.2.bias": torch.zeros(1),
            },
            "layers do not chain (4 outputs into 5)",
        ),
        ({"weight": torch.zeros(2, DIM), "bias": torch.zeros(2)}, "gives 2 values, not one"),
    ],
)
def test_a_head_of_another_format_is_refused_naming_the_setting(tmp_path, state, problem):
    torch.save(state, tmp_path / "head.pth")
    with pytest.raises(AestheticHeadError) as error:
        load_head("clip_scores.aesthetic_head", tmp_path / "head.pth")
    assert str(error.value).startswith(f"clip_scores.aesthetic_head={tmp_path / 'head.pth'}: ")
    assert problem in str(error.value)


# ---------------------------------------------------------------- settings


def test_without_a_checkpoint_the_stage_is_off_and_the_fingerprint_is_unchanged():
    config = local_config()
    assert "clip_scores" not in [s.name for s in build_clip_stages(config)]
    assert "clip_scores" not in config.fingerprint()
    assert [clip_schema().field(f.name).type for f in CLIP_SCORE_COLUMNS] == [
        f.type for f in CLIP_SCORE_COLUMNS
    ]


def test_a_wrong_checkpoint_is_an_error_naming_the_setting(tmp_path, head_file):
    with pytest.raises(ConfigError, match=r"^clip_scores\.model=/no/such: no such checkpoint"):
        ClipScoreConfig(model="/no/such").validate()
    (tmp_path / "vit").mkdir()
    (tmp_path / "vit" / "config.json").write_text(json.dumps({"model_type": "vit"}))
    with pytest.raises(ConfigError, match="holds a 'vit' model, not CLIP"):
        ClipScoreConfig(model=str(tmp_path / "vit")).validate()
    with pytest.raises(ConfigError, match=r"^clip_scores\.aesthetic_head needs clip_scores\.model"):
        ClipScoreConfig(aesthetic_head=str(head_file[0])).validate()


@pytest.mark.slow  # over 1.5 s (README, "Test time"): writes the tiny CLIP
def test_a_head_of_another_size_than_the_model_gives_is_an_error(tmp_path, tiny_clip):
    torch.save(laion_mlp(768).state_dict(), tmp_path / "l14.pth")
    with pytest.raises(ConfigError, match="the head takes 768 values, clip_scores.model gives"):
        ClipScoreConfig(model=str(tiny_clip), aesthetic_head=str(tmp_path / "l14.pth")).validate()


# ---------------------------------------------------------------- the whole path


@pytest.mark.slow
def test_every_usable_clip_gets_an_embedding_an_aesthetic_score_and_a_caption_match(
    tmp_path, tiny_clip, head_file
):
    from transformers import AutoTokenizer, CLIPModel

    from pipeline.data.ip import load_ip
    from pipeline.passes.caption_films import caption_film
    from pipeline.running.runner import run_film

    config = local_config(clip_scores__model=tiny_clip, clip_scores__aesthetic_head=head_file[0])
    result = run_film(BIKES, tmp_path, config, load_ip(None))
    assert result.ok, result.message
    clips = list(read_clips(result.film_dir / "shards"))
    usable = [c for c in clips if c.usable]
    assert usable
    for clip in usable:
        embedding = np.asarray(clip.extra["clip_embedding"], np.float32)
        assert embedding.shape == (DIM,) and abs(np.linalg.norm(embedding) - 1) < 2e-3
        with torch.no_grad():
            expected = head_file[1].layers(torch.from_numpy(embedding)[None])[0, 0].item()
        assert clip.extra["aesthetic_score"] == pytest.approx(expected, rel=1e-4, abs=1e-5)
        assert clip.extra["caption_match"] is None  # not captioned yet
    embeddings = np.stack([c.extra["clip_embedding"] for c in usable])
    assert len(np.unique(embeddings.round(3), axis=0)) == len(usable)  # each clip its own
    manifest = pq.read_table(result.film_dir / "manifest.parquet")
    assert manifest.column("aesthetic_score").null_count == len(clips) - len(usable) - sum(
        c.status == "ok" and not c.usable for c in clips
    )

    config.caption.model = "scripted-internvl"
    caption_film(result.film_dir, config, engine=ScriptedEngine(answer_well))
    model = CLIPModel.from_pretrained(tiny_clip).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_clip)
    captioned = [c for c in read_clips(result.film_dir / "shards") if c.caption_status == "ok"]
    assert len(captioned) == len(usable)
    for clip in captioned:
        with torch.no_grad():
            text = model.get_text_features(**tokenizer([clip.instruction], return_tensors="pt"))
        text = getattr(text, "pooler_output", text)[0].numpy()
        expected = float(np.asarray(clip.extra["clip_embedding"], np.float32) @ text) / float(
            np.linalg.norm(text)
        )
        assert clip.extra["caption_match"] == pytest.approx(expected, abs=1e-4)

    # both are declared scores (stages/scoring/scores.py): reject.scores thresholds them, with reasons
    from pipeline.passes.quality import apply_quality
    from stages.quality import RejectConfig

    aesthetic = float(np.median([c.extra["aesthetic_score"] for c in captioned]))
    match = float(np.median([c.extra["caption_match"] for c in captioned]))
    thresholds = RejectConfig(scores={"aesthetic_score": aesthetic, "caption_match": match})
    apply_quality(result.film_dir, thresholds)
    decided = [c for c in read_clips(result.film_dir / "shards") if c.caption_status == "ok"]
    assert {c.clip_id for c in decided} == {c.clip_id for c in captioned}
    for clip in decided:
        reasons = set(clip.reject_reasons)
        assert ("unaesthetic" in reasons) == (clip.extra["aesthetic_score"] < aesthetic)
        assert ("caption_mismatch" in reasons) == (clip.extra["caption_match"] < match)


# ---------------------------------------------------------------- semantic duplicates


def similar_of(root: Path) -> dict[str, tuple[str, list[str]]]:
    return {
        c.clip_id: (c.duplicate_of, c.reject_reasons)
        for film in sorted(root.iterdir())
        if (film / "shards").is_dir()
        for c in read_clips(film / "shards")
        if c.duplicate_of
    }


def test_planted_semantic_copies_are_found_across_films_and_kept_in_visiting_order(tmp_path):
    from pipeline.passes.quality import apply_quality
    from stages.quality import RejectConfig

    rng = np.random.default_rng(0)
    a, b, c = unit_rows(rng, 12), unit_rows(rng, 12), unit_rows(rng, 12)
    b[3] = nudged(a[5], 0.97, rng)  # a recap: b's clip 3 is a's clip 5, re-cropped
    b[7] = nudged(a[1], 0.93, rng)  # alike, under the threshold
    c[0] = nudged(b[3], 0.99, rng)  # a third copy: it matches the kept one, a[5]
    c[2] = nudged(a[5], 0.96, rng)
    write_embedded_film(tmp_path, "film_a", a)
    write_embedded_film(tmp_path, "film_b", b)
    thresholds = RejectConfig(similar_min_cosine=0.95)
    apply_quality(tmp_path, thresholds)
    ids = {n: [c.clip_id for c in read_clips(tmp_path / f"film_{n}" / "shards")] for n in "ab"}
    assert similar_of(tmp_path) == {ids["b"][3]: (ids["a"][5], ["similar"])}
    blocks = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "similar_index").glob("*.npy")}

    write_embedded_film(tmp_path, "film_c", c)  # a film added: only its clips are searched
    apply_quality(tmp_path, thresholds)
    ids["c"] = [c.clip_id for c in read_clips(tmp_path / "film_c" / "shards")]
    expected = {
        ids["b"][3]: (ids["a"][5], ["similar"]),
        ids["c"][0]: (ids["a"][5], ["similar"]),
        ids["c"][2]: (ids["a"][5], ["similar"]),
    }
    assert similar_of(tmp_path) == expected
    now = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "similar_index").glob("*.npy")}
    assert len(now) == 3 and {k: now[k] for k in blocks} == blocks  # the old films untouched

    for name in ("similar_index", "quality_index.parquet"):  # from scratch: the same result
        target = tmp_path / name
        if target.is_dir():
            for p in target.iterdir():
                p.unlink()
            target.rmdir()
        else:
            target.unlink()
    apply_quality(tmp_path, thresholds)
    assert similar_of(tmp_path) == expected
    apply_quality(tmp_path, RejectConfig())  # the threshold off: nothing is similar
    assert similar_of(tmp_path) == {}


def test_the_search_is_exact_at_the_threshold(tmp_path):
    from pipeline.passes.similar import find_similar

    rng = np.random.default_rng(3)
    rows = unit_rows(rng, 40)
    rows[10] = nudged(rows[2], 0.9512, rng)  # just above, once stored as float16
    rows[20] = nudged(rows[4], 0.9488, rng)  # just below
    film = write_embedded_film(tmp_path, "film", rows)
    pairs = find_similar(tmp_path, {"film": film}, {"film": "s"}, 0.95)
    stored = rows.astype(np.float16).astype(np.float32)
    cosines = stored @ stored.T
    expected = {(i, j) for i in range(40) for j in range(i + 1, 40) if cosines[i, j] >= 0.95}
    ids = [c.clip_id for c in read_clips(film / "shards")]
    found = {tuple(sorted((ids.index(x), ids.index(y)))) for x, y in zip(pairs.first, pairs.second)}
    assert found == expected == {(2, 10)}


@pytest.mark.parametrize("threshold, common_weight", [(0.8, 0.8), (0.01, 0.0)])
def test_the_blocked_search_finds_every_pair_once_across_blocks_groups_and_an_added_film(
    tmp_path, monkeypatch, threshold, common_weight
):
    """Blocks of 16 query rows and groups of 24 indexed rows (not 4096 and 32768), over three
    films of 50 clips: hundreds of pairs at the threshold, each on or off the diagonal of some
    product, must be what a full float32 product finds. Clips about a shared direction are 0.5
    to 0.9 alike (threshold 0.8); random ones -0.5 to 0.5 (0.01: a floor under zero)."""
    from pipeline.passes import similar
    from pipeline.passes.duplicates import film_stamp

    monkeypatch.setattr(similar, "ROW_BLOCK", 16)
    monkeypatch.setattr(similar, "GROUP_ROWS", 24)
    rng = np.random.default_rng(5)
    common = unit_rows(rng, 1)[0]
    films = {}
    for name in ("film_a", "film_b", "film_c"):
        rows = common_weight * common + 0.6 * unit_rows(rng, 50)
        films[name] = rows / np.linalg.norm(rows, axis=1, keepdims=True)

    def pairs_of(names: list[str]) -> tuple[set, set]:
        folders = {n: write_embedded_film(tmp_path, n, films[n]) for n in names}
        found = similar.find_similar(
            tmp_path, folders, {n: film_stamp(f) for n, f in folders.items()}, threshold
        )
        ids = [c.clip_id for n in names for c in read_clips(folders[n] / "shards")]
        stored = np.concatenate([films[n] for n in names]).astype(np.float16).astype(np.float32)
        cosines = stored @ stored.T
        n = len(ids)
        close = cosines >= threshold
        expected = {(ids[i], ids[j]) for i in range(n) for j in range(i + 1, n) if close[i, j]}
        got = [tuple(sorted((x, y), key=ids.index)) for x, y in zip(found.first, found.second)]
        assert len(got) == len(set(got))  # no pair twice
        return set(got), expected

    got, expected = pairs_of(["film_a", "film_b"])  # from scratch: 100 rows in 7 blocks
    assert got == expected and len(expected) > 200
    got, expected = pairs_of(["film_a", "film_b", "film_c"])  # film_c against the index
    assert got == expected and len(expected) > 500


def test_films_embedded_by_two_clip_models_are_an_error_naming_the_film(tmp_path):
    from pipeline.passes.similar import find_similar

    rng = np.random.default_rng(7)
    films = {
        "film_a": write_embedded_film(tmp_path, "film_a", unit_rows(rng, 4)),
        "film_b": write_embedded_film(tmp_path, "film_b", unit_rows(rng, 4, dim=32)),
    }
    with pytest.raises(ValueError, match="film_b: clip embeddings of 32 values, film_a's of 16"):
        find_similar(tmp_path, films, {"film_a": "a", "film_b": "b"}, 0.95)


def test_a_long_search_shows_the_pairs_it_compared(tmp_path, monkeypatch, capsys):
    """The bar counts every pair once, on and off the products' diagonals, up to its total: the
    100 clips of two films make 4,950 pairs, a third film of 50 adds 50 x 100 + 1,225. Below
    PROGRESS_PAIRS, or without `progress`, nothing is drawn."""
    from pipeline.passes import similar

    monkeypatch.setattr(similar, "ROW_BLOCK", 16)
    monkeypatch.setattr(similar, "GROUP_ROWS", 24)
    rng = np.random.default_rng(9)
    films = {n: write_embedded_film(tmp_path, n, unit_rows(rng, 50)) for n in ("a", "b", "c")}
    stamps = {n: n for n in films}
    two = {n: films[n] for n in ("a", "b")}
    similar.find_similar(tmp_path / "quiet", two, stamps, 0.95, progress=True)
    assert "semantic duplicates" not in capsys.readouterr().err  # 4,950 pairs: too few
    monkeypatch.setattr(similar, "PROGRESS_PAIRS", 1)
    similar.find_similar(tmp_path / "no_bar", two, stamps, 0.95, progress=False)
    assert capsys.readouterr().err == ""
    similar.find_similar(tmp_path, two, stamps, 0.95, progress=True)
    drawn = capsys.readouterr().err
    assert "semantic duplicates: 100%" in drawn and "4.95k/4.95k [" in drawn
    similar.find_similar(tmp_path, films, stamps, 0.95, progress=True)
    drawn = capsys.readouterr().err
    assert "6.22k/6.22k [" in drawn and "4.95k" not in drawn
