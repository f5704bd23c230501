"""The paper's MLLM-as-judge evaluation of a game's turns, with a local InternVL.

Each turn's shot is shown as 5 evenly spaced frames in one row (left to right in time order),
with the game's earlier instructions and this turn's, and the judge scores six criteria from 1 to
10 (prompts/game_judge.txt; its wording is ours, written from the paper's description, since the
supplement's own prompt text was not at hand). The judge runs through the caption engines
(stages/captioning/engines.py: transformers or lmdeploy, a local checkpoint; no external API).
An answer that does not give all six scores is counted by reason, with its raw text kept.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from prompts import load_prompt

CRITERIA = (
    "overall_quality",
    "text_alignment",
    "contextual_coherence",
    "character_consistency",
    "emotional_consistency",
    "visual_coherence",
)
LOCAL_ENGINES = ("transformers", "lmdeploy")


def label(criterion: str) -> str:
    """'text_alignment' -> 'Text Alignment', as the prompt names it."""
    return criterion.replace("_", " ").title()


def parse_scores(answer: str) -> tuple[dict[str, int] | None, str | None]:
    """The six scores of an answer, or None and the reason it gives none."""
    scores = {}
    for criterion in CRITERIA:
        words = r"\W*".join(label(criterion).split())
        found = re.search(rf"{words}\W*?(?:score)?\W*(\d+)", answer, re.IGNORECASE)
        if found is None:
            return None, f"no {label(criterion)} score"
        value = int(found.group(1))
        if not 1 <= value <= 10:
            return None, f"{label(criterion)} score {value} outside 1-10"
        scores[criterion] = value
    return scores, None


def turn_history(names: list[str]) -> dict[str, list[str]]:
    """Each turn's earlier turns: the shots before it in its game's folder, in name order."""
    history: dict[str, list[str]] = {}
    by_game: dict[str, list[str]] = {}
    for name in sorted(names):
        by_game.setdefault(str(Path(name).parent), []).append(name)
    for turns in by_game.values():
        for index, name in enumerate(turns):
            history[name] = turns[:index]
    return history


def judge_requests(config, shots: dict[str, Path], texts: dict[str, str]) -> list:
    """One request per turn: the 5-frame row of its shot, the instructions up to it."""
    from stages.captioning.engines import Request
    from stages.captioning.images import clip_frame_grid

    prompt = load_prompt(config.judge_prompt)
    history = turn_history(list(shots))
    requests = []
    for name, path in shots.items():
        earlier = "; ".join(texts[n] for n in history[name]) or "none (this is the first turn)"
        row = clip_frame_grid(
            path.read_bytes(), config.judge_frames, config.judge_frame_height, config.judge_frames
        )
        text = prompt.fill(history=earlier, instruction=texts[name])
        requests.append(Request(name, text, (row,), max_new_tokens=config.judge_max_new_tokens))
    return requests


def judge_turns(config, shots: dict[str, Path], texts: dict[str, str]) -> dict:
    """{'judge': mean score per criterion, 'judge_scored': n, 'judge_unscored': {reason: n},
    'per_clip': {name: {'judge': scores or None, 'judge_answer': raw text}}}."""
    from stages.captioning.engines import EngineError, make_engine
    from stages.captioning.stage import CaptionConfig

    if config.judge_engine not in LOCAL_ENGINES:
        raise ValueError(
            f"judge_engine={config.judge_engine!r}: the judge runs a local InternVL, "
            f"choose {' or '.join(LOCAL_ENGINES)}"
        )
    if not config.judge_model:
        raise ValueError("judge_model is not set: --set judge_model=FOLDER (a local InternVL)")
    engine = make_engine(
        CaptionConfig(
            model=config.judge_model,
            engine=config.judge_engine,
            device=config.device,
            batch_size=config.judge_batch_size,
            max_new_tokens=config.judge_max_new_tokens,
        )
    )
    try:
        engine.load()
    except EngineError as exc:
        raise ValueError(f"judge_model={config.judge_model}: {exc}") from None
    answers = {c.key: c for c in engine.generate(judge_requests(config, shots, texts))}
    per_clip: dict[str, dict] = {}
    unscored: Counter[str] = Counter()
    scored: list[dict[str, int]] = []
    for name in shots:
        answer = answers[name]
        scores, reason = (
            parse_scores(answer.text) if answer.text is not None else (None, "engine error")
        )
        per_clip[name] = {"judge": scores, "judge_answer": answer.text or answer.error}
        if scores is None:
            unscored[reason or "no scores"] += 1
        else:
            scored.append(scores)
    means = {c: sum(s[c] for s in scored) / len(scored) for c in CRITERIA} if scored else {}
    return {
        "judge": means,
        "judge_scored": len(scored),
        "judge_unscored": dict(unscored),
        "per_clip": per_clip,
    }
