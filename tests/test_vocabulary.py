"""One vocabulary (core/vocabulary.py): every module that names caption fields, state tags, game
states or reject reasons reads them from its tables, so they cannot drift apart."""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

import pyarrow as pa
import pytest

from core.record import Clip
from core.schema import CLIP_SCHEMA, MANIFEST_SCHEMA
from core.vocabulary import (
    CAPTION_FIELDS,
    EDITABLE_FIELDS,
    GAME_STATES,
    STATE_NAMES,
    STATE_TAG,
)
from pipeline.data.review import REVIEW_SCHEMA
from prompts import load_prompt
from stages.captioning.parsing import ParseError, StateAnswer, check_state_value, parse_state

ROOT = Path(__file__).resolve().parent.parent
ARROW = {"string": pa.string(), "int8": pa.int8(), "int16": pa.int16()}


def test_the_vocabulary_module_imports_nothing_of_the_project():
    tree = ast.parse((ROOT / "core" / "vocabulary.py").read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module)])
        if alias.name
    }
    assert imported <= {"__future__", "dataclasses"}


def test_record_shards_and_review_file_carry_the_caption_columns_with_the_table_types():
    record = {f.name for f in fields(Clip)}
    for field in CAPTION_FIELDS:
        assert field.name in record
        expected = ARROW.get(field.arrow, pa.list_(pa.string()))
        assert CLIP_SCHEMA.field(field.name).type == expected
        assert MANIFEST_SCHEMA.field(field.name).type == expected
        if field.editable:
            assert REVIEW_SCHEMA.field(field.name).type == expected
    caption_columns = [n for n in CLIP_SCHEMA.names if n in {f.name for f in CAPTION_FIELDS}]
    assert caption_columns == [f.name for f in CAPTION_FIELDS]  # shard order follows the table


def test_the_parser_reads_the_state_the_prompt_asks_for_in_its_order():
    prompt = load_prompt("game_state").text
    example = prompt[prompt.index("Example output:") :]
    asked = re.findall(r"<([A-Z]+)>", example)
    assert asked == list(STATE_TAG.values())
    answer = parse_state(example)
    assert [f.name for f in fields(StateAnswer)] == list(STATE_NAMES)
    assert answer.subject == "Girl" and answer.stamina == -1


@pytest.mark.parametrize("field", [f for f in CAPTION_FIELDS if f.allowed], ids=lambda f: f.name)
def test_a_choice_field_takes_exactly_its_allowed_values(field):
    for value in field.allowed:
        assert check_state_value(field.name, value) == value
    outside = max(field.allowed) + 1
    with pytest.raises(ParseError, match=f"^{field.name} must be one of"):
        check_state_value(field.name, outside)


def test_game_states_are_the_motion_level_and_the_caption_choices():
    assert list(GAME_STATES) == ["motion_level", "stamina", "social", "entertainment"]
    for name in ("stamina", "social", "entertainment"):
        assert set(GAME_STATES[name]) == set(
            next(f for f in CAPTION_FIELDS if f.name == name).allowed
        )
    assert set(EDITABLE_FIELDS) == {"characters", *STATE_NAMES}
