"""`animegamer play`: the next game states for a file of game instructions.

Each line of the instructions file is one turn in the released game_demo format,
`Character: Qiqi; Motion: quickly flying on broomstick; Background: day sky.` For every turn the
trained MLLM sees a sliding window of earlier turns (their predicted shots and states) and
predicts the shot representation and the state tokens; each state field is read by scoring its
allowed values, so the answer is always well formed. With a decoder checkpoint (phase a or c) the
shot is also rendered, with classifier-free guidance against the unconditional shot saved with the
decoder, at the motion scope that stands for the predicted level: the representative value of
that level in the levels file the training shards were labelled with (recorded in the checkpoint).
Writes OUT/states.jsonl (and OUT/turn-NNN.mp4 with a decoder).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from core.cli import input_errors, module_parser, run_command
from prompts.game import INSTRUCTION_PATTERN

HELP = "Play game instructions with a trained MLLM (+ decoder): next game states and shots."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mllm", required=True, help="phase (b) run folder or checkpoint folder")
    parser.add_argument(
        "--instructions", required=True, help="text file, one game instruction per line"
    )
    parser.add_argument(
        "--decoder", help="phase (a) or (c) run/checkpoint folder: also render each shot"
    )
    parser.add_argument(
        "--out", required=True, help="folder for states.jsonl and the rendered shots"
    )
    parser.add_argument(
        "--history",
        type=int,
        default=None,
        help="turns of history the MLLM sees (default: the training max_turns - 1)",
    )
    parser.add_argument(
        "--steps", type=int, help="sampling steps per shot (default: the decoder's sample_steps)"
    )
    parser.add_argument(
        "--guidance-scale",
        type=float,
        help="classifier-free guidance scale, 1 for none (default: the decoder's guidance_scale)",
    )
    parser.add_argument(
        "--level-scopes",
        help="motion scopes for levels 1..5, comma-separated (default: the representative values "
        "of the levels file the MLLM was trained with)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")


def run(args: argparse.Namespace) -> int:
    with input_errors(OSError, ValueError):
        instructions = read_instructions(Path(args.instructions))
        scopes = None
        if args.level_scopes:
            scopes = [float(v) for v in args.level_scopes.split(",")]
            if len(scopes) != 5:
                raise ValueError(f"--level-scopes needs 5 values, got {args.level_scopes!r}")
    records = play(
        args.mllm,
        instructions,
        Path(args.out),
        args.decoder,
        args.history,
        args.steps,
        scopes,
        args.seed,
        args.device,
        args.guidance_scale,
    )
    # The checkpoints load before the first turn: missing (FileNotFoundError, MissingCheckpoint)
    # or of another phase or shape (ValueError); the message names the folder.
    with input_errors(FileNotFoundError, ValueError):
        for record in records:
            print(json.dumps(record))
    return 0


def read_instructions(path: Path) -> list[str]:
    lines = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not INSTRUCTION_PATTERN.match(line):
            raise ValueError(
                f"{path}:{number}: not a game instruction "
                f"('Character: ...; Motion: ...; Background: ...'): {line!r}"
            )
        lines.append(line)
    if not lines:
        raise ValueError(f"{path}: no game instructions")
    return lines


def play(
    mllm_location,
    instructions,
    out: Path,
    decoder_location=None,
    history=None,
    steps=None,
    scopes=None,
    seed=0,
    device_setting="auto",
    guidance_scale=None,
):
    """Yield one record per turn (and write them to out/states.jsonl)."""
    from trainer.shared import checkpoint

    # A folder without a checkpoint is named before torch and the model code (transformers,
    # peft, diffusers: seconds) are imported.
    for location in filter(None, (mllm_location, decoder_location)):
        checkpoint.locate(location)
    import torch

    from core.device import pick_device
    from trainer.models import build
    from trainer.shared import distributed

    device = torch.device(pick_device(device_setting, "--device", 0))
    dtype = distributed.pick_dtype("auto", device)
    model, config = build.trained_mllm(mllm_location, device, dtype)
    scopes = scopes or level_scopes(config, mllm_location)
    renderer = (
        Renderer.load(decoder_location, device, dtype, steps, guidance_scale)
        if decoder_location
        else None
    )
    window = history if history is not None else max(config.max_turns - 1, 0)
    out.mkdir(parents=True, exist_ok=True)
    turns: list[dict] = []
    shots: list = []
    totals = {"stamina": 0, "social": 0, "entertainment": 0}
    generator = torch.Generator().manual_seed(seed)
    with (out / "states.jsonl").open("w") as log:
        for index, instruction in enumerate(instructions):
            start = max(0, len(turns) - window) if window else len(turns)
            shot, states = predict_turn(
                model, turns[start:] + [{"instruction": instruction}], shots[start:]
            )
            turns.append({"instruction": instruction, **states})
            shots.append(shot)
            totals = {k: totals[k] + states[k] for k in totals}
            record = {"turn": index, "instruction": instruction, **states, "totals": dict(totals)}
            if renderer is not None:
                scope = scopes[states["motion_level"] - 1]
                record["motion_scope"] = scope
                record["video"] = renderer.render(
                    shot, scope, generator, out / f"turn-{index:03d}.mp4"
                )
            log.write(json.dumps(record) + "\n")
            yield record


def predict_turn(model, turns: list[dict], history_shots: list):
    """The target turn's predicted shot (tokens x width) and states, field by field."""
    import torch

    from trainer.shared.prompt import STATE_VALUES, Sequence

    base = model.prompts.sequence(turns, target_states=False)
    layout = model.prompts.layout
    shots = torch.stack(history_shots) if history_shots else base_shots(model)
    with torch.no_grad():
        _, predicted, _ = model([base], [shots])
        prefix, states = list(base.input_ids), {}
        for name, tag in layout.state_tags:
            prefix += model.prompts.ids(f"<{tag}>")
            values = STATE_VALUES[name]
            endings = [model.prompts.ids(f"{layout.value.format(v=v)}</{tag}>") for v in values]
            candidates = [
                Sequence(prefix + e, [], base.history_slots, base.query_start) for e in endings
            ]
            logits, _, _ = model(candidates, [shots] * len(candidates))
            scores = [_log_likelihood(logits[i], len(prefix), e) for i, e in enumerate(endings)]
            best = max(range(len(values)), key=lambda i: scores[i])
            states[name] = values[best]
            prefix += endings[best]
    return predicted[0], states


def base_shots(model):
    import torch

    return torch.zeros(0, model.num_queries, model.shot_dim, device=model.queries.device)


def _log_likelihood(logits, start: int, tokens: list[int]) -> float:
    import torch

    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return sum(log_probs[start + i - 1, token].item() for i, token in enumerate(tokens))


def level_scopes(config, location) -> list[float]:
    """The representative scope of each level, from the levels file the MLLM was trained with."""
    if len(config.level_scopes) != 5:
        raise ValueError(
            f"{location}: the MLLM was trained without a levels file with representative values "
            f"(motion_levels={config.motion_levels!r}); give --level-scopes"
        )
    return list(config.level_scopes)


class Renderer:
    """The decoder of a phase (a) or (c) checkpoint with its sampling settings."""

    def __init__(self, decoder, config, unconditional, steps=None, guidance_scale=None):
        from trainer.models.decoder import guidance_from

        if guidance_scale is not None:
            config.guidance_scale = guidance_scale
        self.decoder, self.config = decoder, config
        self.steps = steps or config.sample_steps
        self.guidance = guidance_from(config)
        self.unconditional = unconditional

    @classmethod
    def load(cls, location: str, device, dtype, steps=None, guidance_scale=None) -> Renderer:
        """Rebuilt from the checkpoint's saved config; its weights and unconditional shot."""
        from trainer.models import build
        from trainer.shared import checkpoint
        from trainer.shared.config import config_from_dict

        state = checkpoint.load(location)
        if state["phase"] not in ("encoder", "adapt"):
            raise ValueError(
                f"{location}: a '{state['phase']}' checkpoint holds no decoder "
                f"(use phase encoder or adapt)"
            )
        if "unconditional_shot" not in state["extra"]:
            raise ValueError(
                f"{location}: no unconditional shot saved (a checkpoint of an older trainer); "
                "guided sampling needs one: retrain, or render with --guidance-scale 1"
            )
        config = config_from_dict(state["phase"], state["config"])
        decoder = build.shot_decoder(config, device, dtype)
        weights = {
            k[len("decoder.") :]: v
            for k, v in state["trainable"].items()
            if k.startswith("decoder.")
        }
        checkpoint.restore_trainable(decoder, weights, source=str(location))
        unconditional = state["extra"]["unconditional_shot"].to(device)[None]
        return cls(
            decoder.eval().requires_grad_(False), config, unconditional, steps, guidance_scale
        )

    def render(self, shot, scope: float, generator, path: Path) -> str:
        import torch

        from core.video import encode_mp4

        frames = self.decoder.generate(
            shot[None],
            torch.tensor([scope], device=shot.device),
            self.config.num_frames,
            (self.config.frame_height, self.config.frame_width),
            self.steps,
            generator,
            unconditional=self.unconditional,
            guidance=self.guidance,
            sampler=self.config.sampler,
        )
        path.write_bytes(encode_mp4(frames[0].cpu().numpy(), fps=8.0))
        return path.name


def main(argv: list[str] | None = None) -> int:
    args = module_parser("python -m trainer.play", __doc__, add_arguments).parse_args(argv)
    return run_command("play", run, args)


if __name__ == "__main__":
    raise SystemExit(main())
