"""The clip vocabulary in one place: the caption fields and the reject reasons.

This module imports nothing (not even pyarrow), so every layer can read it: the record and the
shard schema (core), the caption parser and stage (stages/captioning), review and the report
(pipeline), and the trainer all derive their names, tags, Arrow types and allowed values from
the two tables below instead of spelling them again.

- `CAPTION_FIELDS`: every column the caption stage owns, in shard order. A field with a `tag` is
  one of the game state's seven answers (`<S>...</S>`), in the state prompt's order; `rule` says
  how a value is checked (stages/captioning/parsing.py has the checks), `allowed` lists the
  values of a choice, and `editable` marks what a person may correct on the review page.
- `GAME_STATES`: the four states the game model predicts per turn, with their values.
- `REJECT_REASONS`: every reason a clip can be marked not usable, in the order they are listed on
  a clip, with what it means in the report's words (docs/quality.md has the rules).
"""

from __future__ import annotations

from dataclasses import dataclass

# how a caption value is checked (stages/captioning/parsing.check_state_value and friends)
WORD = "word"  # one word: subject, environment
PHRASE = "phrase"  # a few words: the motion description
ADVERB = "adverb"  # an -ly word or a known flat adverb
CHOICE = "choice"  # one of `allowed`
NAMES = "names"  # distinct protagonist names from the reference sheet
DERIVED = "derived"  # filled from other fields or by the stage; never answered nor corrected


@dataclass(frozen=True)
class CaptionField:
    name: str
    arrow: str
    """Arrow type of the column, by name: string, int8, int16 or list<string> (core/schema.py
    resolves it)."""
    tag: str | None = None
    """Its tag in the state answer (`<S>subject</S>`); None: not one of the state's answers."""
    rule: str = DERIVED
    allowed: tuple[int, ...] = ()
    editable: bool = False


CAPTION_FIELDS: tuple[CaptionField, ...] = (
    CaptionField("characters", "list<string>", rule=NAMES, editable=True),
    CaptionField("num_characters", "int16"),
    CaptionField("subject", "string", tag="S", rule=WORD, editable=True),
    CaptionField("motion_description", "string", tag="MD", rule=PHRASE, editable=True),
    CaptionField("environment", "string", tag="EV", rule=WORD, editable=True),
    CaptionField("adverb", "string", tag="MA", rule=ADVERB, editable=True),
    CaptionField("social", "int8", tag="SC", rule=CHOICE, allowed=(0, 1), editable=True),
    CaptionField("entertainment", "int8", tag="ET", rule=CHOICE, allowed=(0, 1), editable=True),
    CaptionField("stamina", "int8", tag="ST", rule=CHOICE, allowed=(1, -1), editable=True),
    CaptionField("instruction", "string"),
    CaptionField("caption_model", "string"),
    CaptionField("prompt_version", "string"),
    CaptionField("caption_status", "string"),
    CaptionField("caption_raw", "string"),
)
CAPTION_COLUMNS = tuple(f.name for f in CAPTION_FIELDS)
# The game state's answers, in the state prompt's order (tag -> field by position).
STATE_FIELDS = tuple(f for f in CAPTION_FIELDS if f.tag is not None)
STATE_NAMES = tuple(f.name for f in STATE_FIELDS)
STATE_TAG: dict[str, str] = {f.name: f.tag for f in STATE_FIELDS if f.tag}  # field -> its tag
EDITABLE_FIELDS = tuple(f.name for f in CAPTION_FIELDS if f.editable)
CAPTION_FIELD = {f.name: f for f in CAPTION_FIELDS}

# The motion stage's levels (stages/motion_levels), which the game model predicts with the
# three choice states of the caption, in the paper's order.
MOTION_LEVELS = (1, 2, 3, 4, 5)
GAME_STATES: dict[str, tuple[int, ...]] = {
    "motion_level": MOTION_LEVELS,
    **{
        name: tuple(sorted(CAPTION_FIELD[name].allowed))
        for name in ("stamina", "social", "entertainment")
    },
}

# The reject reasons, in the order they are listed on a clip: the quality stage's own, the
# dataset-level duplicate, then what a person's review adds.
ERROR = "error"
BLACK = "black"
FADE = "fade"
FLASH = "flash"
TEXT = "text"
SUBTITLE = "subtitle"
LOGO = "logo"
COMBED = "combed"
BLENDED = "blended"
STATIC = "static"
DUPLICATE = "duplicate"
SIMILAR = "similar"
REVIEW = "review"
REJECT_REASONS: dict[str, str] = {
    ERROR: "a stage failed on the clip (see Failed clips)",
    BLACK: "the first frame is black, or more than a few frames are",
    FADE: "a fade from or to black: the first or last frame is much darker than the clip",
    FLASH: "one frame is far brighter than both neighbours",
    TEXT: "a title card, credits or subtitles: the text detector marks part of a frame",
    SUBTITLE: "burned-in subtitles: overlay text inside the film's subtitle band",
    LOGO: "a channel logo or watermark that stays on every shot is inside the clip's window",
    COMBED: "a frame weaves two moments (comb teeth): field restoration missed it",
    BLENDED: "frames mixed from the drawings either side of them (double images): a frame-rate "
    "conversion that blends",
    STATIC: "every frame pair is a held drawing",
    DUPLICATE: "a near-duplicate of a clip that is kept (same film or another)",
    SIMILAR: "its CLIP embedding is almost that of a clip that is kept: a re-cropped or re-timed "
    "copy (recap, reused animation, an opening under other credits)",
    REVIEW: "a person rejected it on the review page",
}
