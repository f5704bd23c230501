"""The text of a game sequence, token by token, and the masks over it.

Two layouts (the `prompt_format` setting), both documented in docs/training.md:

paper    `[INST] instruction [/INST]<VS>` + one `<ANIME_i>` slot per shot token + `</VS>` + the
         states `<MS>3</MS><ST>-1</ST><SC>0</SC><ET>1</ET>` + end of sequence.
release  the released inference_MLLM.py's: `<TURN>instruction<img><frame>` + `<frame_00000>`..
         slots + `</frame></img>` + `<ML><Strength_3></ML><SC><Strength_0></SC><ET><Strength_1>
         </ET><ST><Strength_-1></ST></TURN>` (state order ML, SC, ET, ST; values are tokens).

History turns' slots carry their shot representations (through the input projection); the target
turn's slots are the learnable query tokens, whose hidden states become the predicted shot. Only
the target's state tokens are trained with cross-entropy.

Pieces are tokenised one by one so each slot's position is known exactly; play builds its prompts
with the same code, so training and playing see the same token stream.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from core.vocabulary import GAME_STATES

STATE_VALUES = GAME_STATES  # each state's values, in the order play scores them
IGNORE = -100


@dataclass(frozen=True)
class Layout:
    """How one turn is written: its opening, shot slots, state tags and values, and its end."""

    name: str
    state_tags: tuple[tuple[str, str], ...]
    """(state field, tag) in the order the states are written."""
    turn_open: str
    """Text before the instruction... up to the shot slots; `{instruction}` is filled in."""
    shot_close: str
    slot: str
    """A slot token's name; `{i}` is its index."""
    value: str
    """How a state value is written; `{v}` is the value."""
    turn_end: str | None
    """Text after the states; None: the tokenizer's end-of-sequence token."""
    extra_tokens: tuple[str, ...] = ()

    def special_tokens(self, num_queries: int) -> list[str]:
        tags = [t for _, tag in self.state_tags for t in (f"<{tag}>", f"</{tag}>")]
        fixed = re.findall(r"<[^<>{}]+>", self.turn_open + self.shot_close + (self.turn_end or ""))
        slots = [self.slot.format(i=i) for i in range(num_queries)]
        return list(dict.fromkeys(tags + fixed + list(self.extra_tokens) + slots))

    def state_text(self, states: dict) -> str:
        return "".join(
            f"<{tag}>{self.value.format(v=states[name])}</{tag}>" for name, tag in self.state_tags
        )

    def parse_states(self, text: str) -> dict:
        """Read the states back; a missing or malformed field is None."""
        number = re.escape(self.value).replace(re.escape("{v}"), r"\s*(-?)\s*(\d+)\s*")
        found = {}
        for name, tag in self.state_tags:
            match = re.search(rf"<{tag}>\s*{number}\s*</{tag}>", text)  # decoders may space "- 1"
            found[name] = int(match.group(1) + match.group(2)) if match else None
        return found


LAYOUTS = {
    "paper": Layout(
        name="paper",
        state_tags=(
            ("motion_level", "MS"),
            ("stamina", "ST"),
            ("social", "SC"),
            ("entertainment", "ET"),
        ),
        turn_open="[INST] {instruction} [/INST]<VS>",
        shot_close="</VS>",
        slot="<ANIME_{i}>",
        value="{v}",
        turn_end=None,
    ),
    "release": Layout(
        name="release",
        state_tags=(
            ("motion_level", "ML"),
            ("social", "SC"),
            ("entertainment", "ET"),
            ("stamina", "ST"),
        ),
        turn_open="<TURN>{instruction}<img><frame>",
        shot_close="</frame></img>",
        slot="<frame_{i:05d}>",
        value="<Strength_{v}>",
        turn_end="</TURN>",
        extra_tokens=tuple(f"<Strength_{v}>" for v in range(-5, 6)),
    ),
}


def layout(name: str) -> Layout:
    if name not in LAYOUTS:
        raise ValueError(f"prompt_format={name!r}: choose one of {list(LAYOUTS)}")
    return LAYOUTS[name]


def special_tokens(num_queries: int, layout_name: str = "paper") -> list[str]:
    return layout(layout_name).special_tokens(num_queries)


def add_game_tokens(tokenizer, num_queries: int, layout_name: str = "paper") -> list[int]:
    """Add the layout's special tokens to a tokenizer (idempotent); return their ids."""
    tokens = special_tokens(num_queries, layout_name)
    tokenizer.add_special_tokens(
        {"additional_special_tokens": tokens}, replace_extra_special_tokens=False
    )
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.unk_token or tokenizer.eos_token
    return tokenizer.convert_tokens_to_ids(tokens)


def state_text(states: dict, layout_name: str = "paper") -> str:
    return layout(layout_name).state_text(states)


def parse_states(text: str, layout_name: str = "paper") -> dict:
    """Read `<MS>3</MS>...` (or the release's `<ML><Strength_3></ML>...`) back."""
    return layout(layout_name).parse_states(text)


@dataclass
class Sequence:
    """One tokenised game sequence."""

    input_ids: list[int] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    history_slots: list[int] = field(default_factory=list)
    """Start position of each history turn's shot slots, in turn order."""
    query_start: int = -1


class PromptBuilder:
    def __init__(self, tokenizer, num_queries: int, layout_name: str = "paper"):
        self.tokenizer, self.num_queries = tokenizer, num_queries
        self.layout = layout(layout_name)
        self.slot_ids = tokenizer.convert_tokens_to_ids(
            [self.layout.slot.format(i=i) for i in range(num_queries)]
        )
        self.eos = tokenizer.eos_token_id
        self.bos = tokenizer.bos_token_id

    def turn_end(self) -> list[int]:
        end = self.layout.turn_end
        return [self.eos] if end is None else self.ids(end)

    def states(self, turn: dict) -> list[int]:
        return self.ids(self.layout.state_text(turn)) + self.turn_end()

    def ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def sequence(self, turns: list[dict], target_states: bool = True) -> Sequence:
        """History turns (with states) then the target turn; the target's states are labelled
        when `target_states`, and left out (for play to generate) otherwise."""
        seq = Sequence()
        self._add(seq, [self.bos] if self.bos is not None else [], trained=False)
        for index, turn in enumerate(turns):
            is_target = index == len(turns) - 1
            opening = self.layout.turn_open.format(instruction=turn["instruction"])
            self._add(seq, self.ids(opening), trained=False)
            if is_target:
                seq.query_start = len(seq.input_ids)
            else:
                seq.history_slots.append(len(seq.input_ids))
            self._add(seq, self.slot_ids + self.ids(self.layout.shot_close), trained=False)
            if not is_target:
                self._add(seq, self.states(turn), trained=False)
            elif target_states:
                self._add(seq, self.states(turn), trained=True)
        return seq

    @staticmethod
    def _add(seq: Sequence, ids: list[int], trained: bool) -> None:
        seq.input_ids.extend(ids)
        seq.labels.extend(ids if trained else [IGNORE] * len(ids))


def pad_batch(
    sequences: list[Sequence], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded input ids and labels, and the true lengths."""
    length = max(len(s.input_ids) for s in sequences)
    ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    labels = torch.full((len(sequences), length), IGNORE, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq.input_ids)] = torch.tensor(seq.input_ids)
        labels[row, : len(seq.labels)] = torch.tensor(seq.labels)
    return ids, labels, torch.tensor([len(s.input_ids) for s in sequences])


def attention_allowed(
    lengths: torch.Tensor, query_starts: list[int], num_queries: int, length: int
) -> torch.Tensor:
    """B x L x L booleans (True: the row's token may attend to the column's token).

    Causal over the sequence; within the target's query block every query sees every other (the
    block is bidirectional); padding is never attended to (a padding row sees only itself, which
    keeps softmax finite).
    """
    positions = torch.arange(length)
    causal = positions[None, :] <= positions[:, None]
    allowed = causal[None].repeat(len(lengths), 1, 1)
    for row, (size, start) in enumerate(zip(lengths.tolist(), query_starts)):
        if start >= 0:
            allowed[row, start : start + num_queries, start : start + num_queries] = True
        allowed[row, :, size:] = False
        allowed[row, size:, :] = False
        allowed[row, positions[size:], positions[size:]] = True
    return allowed


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """B x 1 x L x L float mask (0 or the dtype's minimum) that attention adds to its scores."""
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]
