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

from core.vocabulary import (
    ADVERB,
    CAPTION_FIELD,
    CHOICE,
    PHRASE,
    STATE_NAMES,
    STATE_TAG,
    WORD,
)
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

_TAG = re.compile(
    rf"<\s*(?P<tag>{'|'.join(STATE_TAG.values())})\s*>"
    r"(?P<value>.*?)<\s*/\s*(?P=tag)\s*>",
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
    missing = [tag for tag in STATE_TAG.values() if tag not in values]
    if missing:
        raise ParseError(f"missing tags {missing}")
    return StateAnswer(
        **{
            name: check_state_value(name, values[tag], f"<{tag}>")
            for name, tag in STATE_TAG.items()
        }
    )


def check_state_value(field: str, value, label: str | None = None):
    """`value` (text, or an int for the choice fields) as the typed value of state field `field`,
    or a ParseError naming `label` (the field's name by default) and the problem."""
    label = label or field
    spec = CAPTION_FIELD.get(field)
    if spec is None or spec.tag is None:
        raise ParseError(f"{field!r} is not a state field ({', '.join(STATE_NAMES)})")
    if spec.rule == CHOICE:
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(text, str):
            raise ParseError(f"{label} must be one of {list(spec.allowed)}, got {value!r}")
        return _choice(text.strip(), label, spec.allowed)
    if not isinstance(value, str):
        raise ParseError(f"{label} must be text, got {value!r}")
    value = " ".join(value.split())  # an answer was already cleaned; a person's edit may not be
    return _TEXT_RULES[spec.rule](value, label)


def check_character_names(names, sheet: list[str], label: str = "characters") -> list[str]:
    """A list of distinct protagonist names from the reference sheet (the domain a character
    answer maps into); a ParseError names what does not fit."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ParseError(f"{label} must be a list of names, got {names!r}")
    names = [" ".join(n.split()) for n in names]
    if len(set(names)) != len(names):
        raise ParseError(f"{label}: repeated name in {names}")
    unknown = [n for n in names if n not in sheet]
    if unknown:
        known = ", ".join(sheet) if sheet else "none: this IP has no reference sheet"
        raise ParseError(f"{label}: {unknown} not on the reference sheet (protagonists: {known})")
    return names


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


def _one_word(value: str, label: str) -> str:
    if not _WORD.match(value):
        raise ParseError(f"{label} must be one word, got {value!r}")
    return value


def _short_phrase(value: str, label: str) -> str:
    words = value.split()
    if not words:
        raise ParseError(f"{label} is empty")
    if len(words) > MAX_MOTION_WORDS:
        raise ParseError(f"{label} has {len(words)} words (at most {MAX_MOTION_WORDS})")
    bad = [w for w in words if not _PHRASE_WORD.match(w)]
    if bad:
        raise ParseError(f"{label} holds non-words {bad}")
    return " ".join(words)


def _adverb(value: str, label: str) -> str:
    word = value.lower()
    if not _WORD.match(word):
        raise ParseError(f"{label} must be one adverb, got {value!r}")
    if not (word.endswith("ly") or word in FLAT_ADVERBS):
        raise ParseError(f"{label} {value!r} is not an adverb (-ly or a known flat adverb)")
    return word


_TEXT_RULES = {WORD: _one_word, PHRASE: _short_phrase, ADVERB: _adverb}


def _choice(value: str, label: str, allowed: tuple[int, ...]) -> int:
    if not re.fullmatch(r"[+-]?\d+", value):
        raise ParseError(f"{label} must be one of {list(allowed)}, got {value!r}")
    number = int(value)
    if number not in allowed:
        raise ParseError(f"{label} must be one of {list(allowed)}, got {number}")
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
