"""Reading the model's two answers into typed, domain-checked values.

Anything that does not fit is a `ParseError` naming the problem; the caller retries and, in the
end, records the clip as caption_failed with the raw text. Nothing outside a field's domain is
ever returned.

Character answer: `[Num]2[ID]1,3` as the prompt's format line says, `[Number]2[Index]1,3` as its
example says, and the small variations models add (spaces, colons, a trailing full stop, quotes,
chatter before or after). The answer must appear once, its count must equal the number of
distinct indices, and every index must name a protagonist on the reference sheet.

State answer: the seven tags `<S> <MD> <EV> <MA> <SC> <ET> <ST>`, each exactly once (a tag
repeated with the same value is accepted), chatter around them ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from prompts.game import instruction_text as game_instruction


class ParseError(ValueError):
    pass


# ---- character matching -------------------------------------------------------------------

_COUNT_LABEL = r"(?:num|number|count)"
_INDEX_LABEL = r"(?:id|ids|index|indices|indexes)"
_CHARACTER_ANSWER = re.compile(
    rf"\[\s*{_COUNT_LABEL}\s*\]\s*:?\s*(?P<count>\d+)\s*"
    # an index list stays on its line: digits after a line break are chatter, not indices
    rf"\[\s*{_INDEX_LABEL}\s*\]\s*:?\s*(?P<ids>\d+(?:[ \t]*(?:,|;|[ \t]|\band\b)[ \t]*\d+)*)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class CharacterAnswer:
    indices: tuple[int, ...]  # 1-based, as on the reference sheet, in the order given
    names: tuple[str, ...]


def parse_characters(text: str, names: list[str]) -> CharacterAnswer:
    """Map the answer's 1-based indices onto `names` (the reference sheet's order)."""
    if not text or not text.strip():
        raise ParseError("empty answer")
    matches = list(_CHARACTER_ANSWER.finditer(text))
    if not matches:
        raise ParseError("no '[Num]<n>[ID]<i,j>' answer found")
    found = {(m.group("count"), _normalise_ids(m.group("ids"))) for m in matches}
    if len(found) > 1:
        raise ParseError(f"{len(found)} different answers in one response")
    count_text, ids = found.pop()
    count = int(count_text)
    if count == 0:
        if any(ids):
            raise ParseError(f"count 0 with indices {list(ids)}")
        return CharacterAnswer((), ())
    if 0 in ids:
        raise ParseError(f"index 0 given with count {count}")
    if len(set(ids)) != len(ids):
        raise ParseError(f"repeated index in {list(ids)}")
    if len(ids) != count:
        raise ParseError(f"count {count} but {len(ids)} indices {list(ids)}")
    unknown = [i for i in ids if i > len(names)]
    if unknown:
        raise ParseError(f"indices {unknown} beyond the {len(names)} protagonists on the sheet")
    return CharacterAnswer(ids, tuple(names[i - 1] for i in ids))


def _normalise_ids(ids_text: str) -> tuple[int, ...]:
    return tuple(int(i) for i in re.findall(r"\d+", ids_text))


# ---- game state ----------------------------------------------------------------------------

STATE_TAGS = ("S", "MD", "EV", "MA", "SC", "ET", "ST")
_TAG = re.compile(
    r"<\s*(?P<tag>S|MD|EV|MA|SC|ET|ST)\s*>(?P<value>.*?)<\s*/\s*(?P=tag)\s*>",
    re.IGNORECASE | re.DOTALL,
)
_WORD = re.compile(r"^[A-Za-z][A-Za-z'-]*$")
_PHRASE_WORD = re.compile(r"^[A-Za-z][A-Za-z'-]*$")
MAX_MOTION_WORDS = 8
# Adverbs that do not end in -ly but describe how something moves. Anything else must end in -ly:
# a check on shape, not a dictionary, so "quickly" passes and "Forest" or "run" do not.
FLAT_ADVERBS = frozenset(
    {
        "fast",
        "hard",
        "still",
        "straight",
        "far",
        "high",
        "low",
        "slow",
        "quick",
        "loud",
        "long",
        "together",
        "forward",
        "forwards",
        "backward",
        "backwards",
        "upward",
        "upwards",
        "downward",
        "downwards",
        "away",
        "around",
        "ahead",
        "apart",
        "aside",
        "back",
        "down",
        "up",
        "across",
        "abroad",
        "alone",
        "almost",
        "already",
        "well",
        "much",
        "little",
        "less",
        "more",
        "very",
        "quite",
        "rather",
        "too",
        "again",
        "once",
        "twice",
        "often",
        "soon",
        "now",
        "then",
    }
)


@dataclass(frozen=True)
class StateAnswer:
    subject: str
    motion_description: str
    environment: str
    adverb: str
    social: int
    entertainment: int
    stamina: int


def parse_state(text: str) -> StateAnswer:
    if not text or not text.strip():
        raise ParseError("empty answer")
    values = _tag_values(text)
    missing = [t for t in STATE_TAGS if t not in values]
    if missing:
        raise ParseError(f"missing tags {missing}")
    return StateAnswer(
        subject=_one_word(values["S"], "S"),
        motion_description=_short_phrase(values["MD"]),
        environment=_one_word(values["EV"], "EV"),
        adverb=_adverb(values["MA"]),
        social=_choice(values["SC"], "SC", (0, 1)),
        entertainment=_choice(values["ET"], "ET", (0, 1)),
        stamina=_choice(values["ST"], "ST", (1, -1)),
    )


def _tag_values(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for match in _TAG.finditer(text):
        tag, value = match.group("tag").upper(), _clean(match.group("value"))
        if tag in values and values[tag] != value:
            raise ParseError(f"<{tag}> given twice with different values")
        values[tag] = value
    return values


def _clean(value: str) -> str:
    """Drop surrounding whitespace, quotes and a final full stop; collapse inner whitespace."""
    value = " ".join(value.split())
    return value.strip("\"'`").rstrip(".").strip()


def _one_word(value: str, tag: str) -> str:
    if not _WORD.match(value):
        raise ParseError(f"<{tag}> must be one word, got {value!r}")
    return value


def _short_phrase(value: str) -> str:
    words = value.split()
    if not words:
        raise ParseError("<MD> is empty")
    if len(words) > MAX_MOTION_WORDS:
        raise ParseError(f"<MD> has {len(words)} words (at most {MAX_MOTION_WORDS})")
    bad = [w for w in words if not _PHRASE_WORD.match(w)]
    if bad:
        raise ParseError(f"<MD> holds non-words {bad}")
    return " ".join(words)


def _adverb(value: str) -> str:
    word = value.lower()
    if not _WORD.match(word):
        raise ParseError(f"<MA> must be one adverb, got {value!r}")
    if not (word.endswith("ly") or word in FLAT_ADVERBS):
        raise ParseError(f"<MA> {value!r} is not an adverb (-ly or a known flat adverb)")
    return word


def _choice(value: str, tag: str, allowed: tuple[int, ...]) -> int:
    if not re.fullmatch(r"[+-]?\d+", value):
        raise ParseError(f"<{tag}> must be one of {list(allowed)}, got {value!r}")
    number = int(value)
    if number not in allowed:
        raise ParseError(f"<{tag}> must be one of {list(allowed)}, got {number}")
    return number


# ---- the game-turn text --------------------------------------------------------------------


def instruction_text(characters: list[str] | None, state: StateAnswer) -> str:
    """The game-turn instruction of a captioned clip (the one rule lives in prompts.game).

    The matched protagonists name the character; with none matched (or no reference sheet), the
    state prompt's subject does.
    """
    text = game_instruction(
        characters, state.subject, state.adverb, state.motion_description, state.environment
    )
    if text is None:  # parse_state guarantees every field; this would be a bug upstream
        raise ParseError(f"an incomplete state answer cannot make an instruction: {state}")
    return text
