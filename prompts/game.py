"""The text of a game turn, built in one place for the captioning side and the trainer.

AnimeGamer's player instruction is the released game_demo format,
`Character: Qiqi; Motion: quickly flying on broomstick; Background: day sky.`, and the shot
encoder's T5 reads the action as the paper writes it, the adverb first: "Softly talk". Both come
from the caption fields (characters or subject, adverb, motion description, environment) through
the functions below, so captioning, training and playing cannot drift apart. This module imports
nothing of the project, so every package may use it without an import cycle.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# A line `play` accepts as a game instruction.
INSTRUCTION_PATTERN = re.compile(r"^Character:\s*[^;]+;\s*Motion:\s*[^;]+;\s*Background:\s*.+$")


def action_text(adverb: str | None, motion_description: str | None) -> str:
    """The action as the paper gives it to T5: the adverb, then the motion ("Softly talk").

    Without an adverb the motion alone, capitalised the same way; empty when both are missing.
    """
    words = " ".join(w.strip() for w in (adverb, motion_description) if w and w.strip())
    return words[:1].upper() + words[1:]


def instruction_text(
    characters: list[str] | None,
    subject: str | None,
    adverb: str | None,
    motion_description: str | None,
    environment: str | None,
) -> str | None:
    """`Character: <who>; Motion: <adverb> <motion>; Background: <environment>.`

    <who> is every matched protagonist, comma-separated (the captioning side has always written
    all of them); with none matched, the state prompt's subject. None when a part is missing: no
    instruction is better than a half one.
    """
    who = ", ".join(c for c in characters or [] if c) or subject
    action = action_text(adverb, motion_description)
    if not (who and motion_description and environment):
        return None
    # the instruction keeps the demo's lower-case motion ("quickly flying"), T5 the paper's casing
    return (
        f"Character: {who}; Motion: {action[:1].lower() + action[1:]}; Background: {environment}."
    )


def row_instruction(row: Mapping[str, Any]) -> str | None:
    """`instruction_text` of a clip row's caption fields (a missing column counts as missing)."""
    return instruction_text(
        row.get("characters"),
        row.get("subject"),
        row.get("adverb"),
        row.get("motion_description"),
        row.get("environment"),
    )
