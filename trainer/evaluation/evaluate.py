"""`animegamer eval`: the paper's metrics for generated shots.

  CLIP-I   mean cosine similarity of CLIP image embeddings, generated frame vs reference
  CLIP-T   mean cosine similarity of a generated frame's CLIP image embedding with its text
  DreamSim DreamSim similarity = 1 - DreamSim distance, generated frame vs reference: higher is
           closer, as the paper reports it (0.740 for AnimeGamer); `dreamsim_distance` is the
           distance itself
  ACC-F, MAE-F  the motion level measured on the generated shot vs the requested level
           (pipeline/motion_eval.py: the rule that labelled the training clips)
  judge    the MLLM-as-judge scores (1-10, six criteria) of a local InternVL (trainer/judge.py)

Generated shots are the .mp4 files under the generated folder, named by their path in it
without the suffix: `game-01/turn-003`. The paper's benchmark has no ground-truth video (its
stories were written by GPT-4o), so CLIP-I and DreamSim compare each turn's shot with a reference
image of the game's character: `--references` is a folder holding `<game>.png` (or .jpg, .jpeg,
.webp) for each game folder, or one image for every shot. A folder of reference clips with the
shots' names (`<name>.mp4`) compares shot with clip instead, frame by frame.

Frames: `frames` evenly spaced frames of each clip; a reference image is compared with each of
them. DreamSim (Fu et al. 2023) is computed as its reference code does, over backbones given as local transformers folders: each
backbone embeds the 224x224 bicubic-resized frame normalised with its own mean and std (CLIP
models: the projected image embedding; ViT/DINO models: the CLS token of the last block, before
the final norm), the embeddings are concatenated, centred and scaled to unit length, and the
distance is 1 - cosine similarity. With the DreamSim ensemble's backbones (DINO ViT-B/16, CLIP
ViT-B/16, OpenCLIP ViT-B/16, with DreamSim's LoRA merged; docs/training.md) this is DreamSim.

Every checkpoint is a local folder named by a setting; nothing is downloaded, and a missing one is
an error naming the setting. Settings: `--set name=value` (`--settings` lists them).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stages.scoring import clip_model
from stages.scoring.clip_model import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD, paired, unit

HELP = "CLIP-I, CLIP-T, DreamSim, ACC-F, MAE-F and the MLLM judge of generated game shots."
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")


@dataclass
class EvalConfig:
    clip_model: str = "checkpoints/clip-vit-large-patch14"
    """CLIP (vision + text, transformers format, with its tokenizer) for CLIP-I and CLIP-T."""
    dreamsim_models: list[str] = field(
        default_factory=lambda: [
            "checkpoints/dreamsim/dino_vitb16",
            "checkpoints/dreamsim/clip_vitb16",
            "checkpoints/dreamsim/open_clip_vitb16",
        ]
    )
    """DreamSim's backbones, transformers folders (empty list: no DreamSim)."""
    frames: int = 8
    """Frames compared per clip, evenly spaced."""
    image_size: int = 224
    """Side of the square frames are resized to where a backbone does not say its own."""
    fps: float = 8.0
    """Rate the clips are sampled at before their motion is measured (the dataset's)."""
    device: str = "auto"
    judge_model: str = ""
    """InternVL checkpoint (a local folder; transformers' native `-hf` format for the
    transformers engine) that judges each turn (`--judge`)."""
    judge_engine: str = "transformers"
    """Caption engine the judge runs on: `transformers` or `lmdeploy` (local only)."""
    judge_prompt: str = "game_judge"
    """Prompt name under prompts/ (or a prompt file) of the judge."""
    judge_frames: int = 5
    """Frames of each turn's shot the judge sees, in one row left to right."""
    judge_frame_height: int = 240
    """Height of each frame in the judge's row, in pixels."""
    judge_max_new_tokens: int = 96
    judge_batch_size: int = 4


def add_arguments(parser) -> None:
    parser.add_argument("generated", type=Path, nargs="?", help="folder of generated .mp4 shots")
    parser.add_argument(
        "--references",
        type=Path,
        help="a reference image per game (<game>.png in a folder), one image, or a folder of "
        "reference .mp4 clips with the shots' names",
    )
    parser.add_argument(
        "--texts",
        type=Path,
        help="text per clip for CLIP-T: JSON {clip: text}, or play's states.jsonl",
    )
    parser.add_argument(
        "--levels", type=Path, help="requested level per clip (motion-eval's format): ACC-F/MAE-F"
    )
    parser.add_argument(
        "--judge", action="store_true", help="score each turn with the MLLM judge (judge_model)"
    )
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE"
    )
    parser.add_argument("--settings", action="store_true", help="list the settings and exit")


def run(args) -> int:
    from core.settings import ConfigError, field_docs, parse_assignment, set_setting

    config = EvalConfig()
    if args.settings:
        docs = field_docs(EvalConfig)
        for f in dataclasses.fields(config):
            print(f"{f.name} = {getattr(config, f.name)!r}\n    {docs.get(f.name, '')}")
        return 0
    from core.cli import input_errors

    # A missing backbone is trainer.backbones.MissingCheckpoint, a FileNotFoundError: not imported
    # by name, since that module imports torch, which an error in the arguments should not wait for.
    with input_errors(ConfigError, FileNotFoundError, ValueError):
        for item in args.overrides:
            set_setting(config, *parse_assignment(item), "--set")
        if args.generated is None:
            raise ValueError("give the folder of generated shots")
        result = evaluate(
            config, args.generated, args.references, args.texts, args.levels, args.judge
        )
    print(json.dumps({k: v for k, v in result.items() if k != "per_clip"}, indent=1))
    if args.json:
        from core.io import write_json_atomic

        write_json_atomic(result, args.json)
    return 0


def evaluate(
    config: EvalConfig,
    generated: Path,
    references: Path | None = None,
    texts: Path | None = None,
    levels: Path | None = None,
    judge: bool = False,
) -> dict:
    """The metrics the inputs allow: CLIP-I and DreamSim need references, CLIP-T and the judge
    texts (given, or each game folder's play states.jsonl), ACC-F/MAE-F requested levels."""
    shots = clips_by_name(generated)
    result: dict = {"clips": len(shots)}
    per_clip: dict[str, dict] = {name: {} for name in shots}
    frames = {name: sample_frames(path, config.frames) for name, path in shots.items()}
    device = _device(config.device)
    if references is not None:
        ref_frames = {name: reference_frames(references, name, config.frames) for name in shots}
        clip = ClipScorer(config.clip_model, device)
        _score(
            per_clip, "clip_i", {n: clip.image_similarity(frames[n], ref_frames[n]) for n in shots}
        )
        if config.dreamsim_models:
            dreamsim = DreamSim(config.dreamsim_models, config.image_size, device)
            distances = {n: dreamsim.distance(frames[n], ref_frames[n]) for n in shots}
            _score(per_clip, "dreamsim_distance", distances)
            _score(per_clip, "dreamsim", {n: 1.0 - d for n, d in distances.items()})
    if texts is not None or judge:
        text_of = shot_texts(generated, shots, texts)
    if texts is not None:
        clip = ClipScorer(config.clip_model, device)
        _score(per_clip, "clip_t", {n: clip.text_similarity(frames[n], text_of[n]) for n in shots})
    if judge:
        from trainer.evaluation.judge import judge_turns

        judged = judge_turns(config, shots, text_of)
        for name, values in judged.pop("per_clip").items():
            per_clip[name] |= values
        result |= judged
    if levels is not None:
        result |= motion_levels(generated, levels, config.fps)
    for metric in ("clip_i", "dreamsim", "dreamsim_distance", "clip_t"):
        values = [c[metric] for c in per_clip.values() if metric in c]
        if values:
            result[metric] = float(np.mean(values))
    result["per_clip"] = per_clip
    return result


def reference_frames(references: Path, name: str, count: int) -> np.ndarray:
    """What shot `name` is compared with: a clip `<name>.mp4` in the references folder, else the
    reference image of its game (`<game>.png`, game = the shot's first folder), or the one image
    `references` names."""
    if references.is_file():
        return read_image(references)
    if not references.is_dir():
        raise FileNotFoundError(f"{references}: no such reference image or folder")
    clip = references / f"{name}.mp4"
    if clip.is_file():
        return sample_frames(clip, count)
    game = Path(name).parts[0] if len(Path(name).parts) > 1 else None
    for suffix in IMAGE_SUFFIXES if game else ():
        if (references / f"{game}{suffix}").is_file():
            return read_image(references / f"{game}{suffix}")
    wanted = f"{name}.mp4" + (f" or a {game}.png image of its game's character" if game else "")
    raise FileNotFoundError(f"{references}: no reference for {name} (expected {wanted})")


def read_image(path: Path) -> np.ndarray:
    """One RGB image as a 1 x H x W x 3 frame array."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return np.array(image.convert("RGB"))[None]
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"{path}: not a readable image ({exc})") from None


def shot_texts(generated: Path, shots: dict[str, Path], texts: Path | None) -> dict[str, str]:
    """Each shot's instruction: from `texts` (keys: a shot's name, or its file name for a
    single game), else from the states.jsonl play wrote beside each game's shots."""
    found: dict[str, str] = {}
    if texts is not None:
        given = read_texts(texts)
        found = {n: given.get(n) or given.get(Path(n).name, "") for n in shots}
    else:
        for name in shots:
            states = generated / Path(name).parent / "states.jsonl"
            if states.is_file():
                found[name] = read_texts(states).get(Path(name).name, "")
    missing = sorted(n for n in shots if not found.get(n))
    if missing:
        source = texts or "the games' states.jsonl"
        raise ValueError(f"{source}: no text for {', '.join(missing[:10])}")
    return found


def _score(per_clip: dict, metric: str, values: dict) -> None:
    for name, value in values.items():
        per_clip[name][metric] = value


def clips_by_name(folder: Path) -> dict[str, Path]:
    """The folder's .mp4 clips at any depth, by their path in it without the suffix (the shot's
    name); a missing folder or one without clips is an error naming it."""
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: not a folder of clips")
    found = {
        p.relative_to(folder).with_suffix("").as_posix(): p for p in sorted(folder.rglob("*.mp4"))
    }
    if not found:
        raise FileNotFoundError(f"{folder}: no .mp4 clips")
    return found


def sample_frames(path: Path, count: int) -> np.ndarray:
    """`count` evenly spaced RGB frames of a clip (all of them when it has fewer)."""
    import av

    try:
        with av.open(str(path)) as container:
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    except (av.error.FFmpegError, IndexError) as exc:
        raise ValueError(f"{path}: not a readable video ({exc})") from None
    if not frames:
        raise ValueError(f"{path}: no decodable frame")
    picks = np.unique(np.linspace(0, len(frames) - 1, min(count, len(frames))).round().astype(int))
    return np.stack([frames[i] for i in picks])


def read_texts(path: Path) -> dict[str, str]:
    """{clip name: text} from a JSON object or from play's states.jsonl (video -> instruction)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: texts file not found")
    if path.suffix == ".jsonl":
        texts = {}
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                record = json.loads(line)
                if "video" not in record or "instruction" not in record:
                    raise ValueError(f"{path}:{number}: a play record needs video and instruction")
                texts[Path(record["video"]).stem] = record["instruction"]
        return texts
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object {{clip: text}}")
    return {
        Path(str(k)).stem if str(k).endswith(".mp4") else str(k): str(v) for k, v in data.items()
    }


def motion_levels(generated: Path, levels: Path, fps: float) -> dict:
    """ACC-F and MAE-F with motion-eval's own code and the pipeline's motion settings."""
    from pipeline.data.config import load_config
    from pipeline.motion_eval import (
        match_clips,
        measure_clip,
        read_requested_levels,
        summarise,
    )
    from stages.motion import MotionScope

    requested = read_requested_levels(levels)
    stage = MotionScope(load_config().motion)
    stage.setup()
    rows = [
        measure_clip(stage, path, requested[name], fps)
        for name, path in match_clips(generated, requested).items()
    ]
    summary = summarise(rows, stage)
    return {"acc_f": summary["acc_f"], "mae_f": summary["mae_f"]}


def _device(setting: str):
    import torch

    from core.device import pick_device

    return torch.device(pick_device(setting, "device"))


class ClipScorer(clip_model.ClipScorer):
    """The shared CLIP embeddings (stages/scoring/clip_model.py) of the `clip_model` setting's folder."""

    def __init__(self, location: str, device):
        from trainer.shared.backbones import resolve

        super().__init__(resolve("clip_model", location, hub=False), device)


class DreamSim:
    """DreamSim's distance over backbones given as local transformers folders."""

    def __init__(self, locations: list[str], size: int, device):
        from transformers import AutoConfig, AutoModel, CLIPVisionModelWithProjection

        from trainer.shared.backbones import resolve

        self.size, self.device, self.backbones = size, device, []
        for location in locations:
            root = resolve("dreamsim_models", location, hub=False)
            kind = AutoConfig.from_pretrained(root).model_type
            if kind.startswith("clip"):  # "embedding": the projected image embedding
                model = CLIPVisionModelWithProjection.from_pretrained(root)
                stats = clip_model.image_stats(root, CLIP_MEAN, CLIP_STD)
            else:  # ViT / DINO: "cls", the last block's CLS token
                model = AutoModel.from_pretrained(root)
                stats = clip_model.image_stats(root, IMAGENET_MEAN, IMAGENET_STD)
            self.backbones.append((kind.startswith("clip"), model.to(device).eval(), stats))
        # DreamSim resizes to 224, the size of its backbones; a backbone's own size wins
        self.sizes = [getattr(m.config, "image_size", size) for _, m, _ in self.backbones]

    def embed(self, frames: np.ndarray):
        import torch

        parts = []
        with torch.no_grad():
            for (is_clip, model, (mean, std)), size in zip(self.backbones, self.sizes):
                pixels = clip_model.pixels(frames, size, mean, std, self.device)
                if is_clip:
                    parts.append(model(pixel_values=pixels).image_embeds)
                else:
                    out = model(pixel_values=pixels, output_hidden_states=True)
                    parts.append(out.hidden_states[-1][:, 0])
        embedding = torch.cat(parts, dim=-1)
        # DreamSim's normalize_embeds: centre each embedding, then unit length
        return unit(embedding - embedding.mean(dim=-1, keepdim=True))

    def distance(self, generated: np.ndarray, reference: np.ndarray) -> float:
        a, b = paired(self.embed, generated, reference)
        return float((1 - (a * b).sum(-1)).mean())


def main(argv: list[str] | None = None) -> int:
    from core.cli import module_parser, run_command

    args = module_parser("python -m trainer.evaluate", __doc__, add_arguments).parse_args(argv)
    return run_command("eval", run, args)


if __name__ == "__main__":
    sys.exit(main())
