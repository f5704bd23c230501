"""`animegamer play`: the next game states for a file of game instructions.

Each line of the instructions file is one turn in the released game_demo format,
`Character: Qiqi; Motion: quickly flying on broomstick; Background: day sky.` For every turn the
trained MLLM sees a sliding window of earlier turns (their predicted shots and states) and
predicts the shot representation and the state tokens; each state field is read by scoring its
allowed values, so the answer is always well formed. With a decoder checkpoint (phase a or c) the
shot is also rendered, at the motion scope that stands for the predicted level.
Writes OUT/states.jsonl (and OUT/turn-NNN.mp4 with a decoder).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HELP = "Play game instructions with a trained MLLM (+ decoder): next game states and shots."
INSTRUCTION = re.compile(r"^Character:\s*[^;]+;\s*Motion:\s*[^;]+;\s*Background:\s*.+$")
LEVEL_SCOPES = (0.5, 2.5, 10.0, 15.0, 40.0)  # the released decoder's flow values for levels 1..5


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
    parser.add_argument("--steps", type=int, default=50, help="diffusion sampling steps per shot")
    parser.add_argument(
        "--level-scopes",
        default=",".join(map(str, LEVEL_SCOPES)),
        help="motion scope given to the decoder for levels 1..5",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")


def run(args: argparse.Namespace) -> int:
    try:
        instructions = read_instructions(Path(args.instructions))
        scopes = [float(v) for v in args.level_scopes.split(",")]
        if len(scopes) != 5:
            raise ValueError(f"--level-scopes needs 5 values, got {args.level_scopes!r}")
    except (OSError, ValueError) as exc:
        print(f"animegamer play: error: {exc}", file=sys.stderr)
        return 2
    for record in play(
        args.mllm,
        instructions,
        Path(args.out),
        args.decoder,
        args.history,
        args.steps,
        scopes,
        args.seed,
        args.device,
    ):
        print(json.dumps(record))
    return 0


def read_instructions(path: Path) -> list[str]:
    lines = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not INSTRUCTION.match(line):
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
    steps=50,
    scopes=LEVEL_SCOPES,
    seed=0,
    device_setting="auto",
):
    """Yield one record per turn (and write them to out/states.jsonl)."""
    import torch

    from core.device import pick_device
    from trainer import build, distributed

    device = torch.device(pick_device(device_setting, "--device", 0))
    dtype = distributed.pick_dtype("auto", device)
    model, config = build.trained_mllm(mllm_location, device, dtype)
    decoder, decoder_config = (
        load_decoder(decoder_location, device, dtype) if decoder_location else (None, None)
    )
    window = history if history is not None else max(config.max_turns - 1, 0)
    out.mkdir(parents=True, exist_ok=True)
    turns, shots, totals = [], [], {"stamina": 0, "social": 0, "entertainment": 0}
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
            if decoder is not None:
                record["video"] = render(
                    decoder,
                    decoder_config,
                    shot,
                    scopes[states["motion_level"] - 1],
                    steps,
                    generator,
                    out / f"turn-{index:03d}.mp4",
                )
            log.write(json.dumps(record) + "\n")
            yield record


def predict_turn(model, turns: list[dict], history_shots: list):
    """The target turn's predicted shot (tokens x width) and states, field by field."""
    import torch

    from trainer.prompt import STATE_TAGS, STATE_VALUES, Sequence

    base = model.prompts.sequence(turns, target_states=False)
    shots = torch.stack(history_shots) if history_shots else base_shots(model)
    with torch.no_grad():
        _, predicted, _ = model([base], [shots])
        prefix, states = list(base.input_ids), {}
        for name, tag in STATE_TAGS:
            prefix += model.prompts.ids(f"<{tag}>")
            values = STATE_VALUES[name]
            endings = [model.prompts.ids(f"{v}</{tag}>") for v in values]
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


def load_decoder(location: str, device, dtype):
    """The decoder of a phase (a) or (c) checkpoint, rebuilt from its saved config."""
    from trainer import build, checkpoint
    from trainer.config import config_from_dict

    state = checkpoint.load(location)
    if state["phase"] not in ("encoder", "adapt"):
        raise ValueError(
            f"{location}: a '{state['phase']}' checkpoint holds no decoder (use phase encoder or adapt)"
        )
    config = config_from_dict(state["phase"], state["config"])
    decoder = build.shot_decoder(config, device, dtype)
    weights = {
        k[len("decoder.") :]: v for k, v in state["trainable"].items() if k.startswith("decoder.")
    }
    checkpoint.restore_trainable(decoder, weights, source=str(location))
    return decoder.eval().requires_grad_(False), config


def render(decoder, config, shot, scope: float, steps: int, generator, path: Path) -> str:
    import torch

    from core.video import encode_mp4

    frames = decoder.generate(
        shot[None],
        torch.tensor([scope], device=shot.device),
        config.num_frames,
        (config.frame_height, config.frame_width),
        steps,
        generator,
    )
    path.write_bytes(encode_mp4(frames[0].cpu().numpy(), fps=8.0))
    return path.name


def main(argv: list[str] | None = None) -> int:
    from trainer.cli import module_parser

    return run(module_parser("python -m trainer.play", __doc__, add_arguments).parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
