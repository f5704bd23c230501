"""The caption answers' parser, the prompts and the two pictures: no model involved."""

from __future__ import annotations

import pytest
from conftest import SINTEL_REFERENCES
from PIL import Image

from prompts import PromptError, available_prompts, load_prompt, parse_prompt
from stages.captioning.images import (
    FRAME_GAP,
    build_reference_sheet,
    clip_frame_grid,
    sample_indices,
)
from stages.captioning.parsing import (
    ParseError,
    StateAnswer,
    instruction_text,
    parse_characters,
    parse_state,
)

NAMES = ["Sintel", "Scales", "Gran"]


# ---- character answers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[Number]2[Index]1,3", ("Sintel", "Gran")),  # the prompt's example
        ("[Num]1[ID]2", ("Scales",)),  # the prompt's format line
        ("[Num]2[Index]3, 1", ("Gran", "Sintel")),  # mixed labels, order kept
        ("[Number]1[Index]2\n3 characters are visible", ("Scales",)),  # chatter on the next line
        ("[number]: 2 [index]: 1 and 2.", ("Sintel", "Scales")),
        ("'[Number]1[Index]1'", ("Sintel",)),
        ("Sure! Looking at Image-2: [Number]1[ID]3 - the old man.", ("Gran",)),
        ("[Number]0[Index]0", ()),
        ("[Number]2[Index]1,3\n[Number]2[Index]1, 3", ("Sintel", "Gran")),  # repeated, same answer
    ],
)
def test_character_answers_in_every_accepted_form(text, expected):
    assert parse_characters(text, NAMES).names == expected


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "empty"),
        ("   ", "empty"),
        ("There are two characters: Sintel and the dragon.", "no '[Num]"),
        ("[Number]2[Index]1", "count 2 but 1"),
        ("[Number]1[Index]4", "beyond the 3"),
        ("[Number]2[Index]1,1", "repeated"),
        ("[Number]0[Index]2", "count 0 with"),
        ("[Number]1[Index]0", "index 0"),
        ("[Number]1[Index]1 ... or maybe [Number]1[Index]2", "different answers"),
        ("[Number]2", "no '[Num]"),  # partial
    ],
)
def test_character_answers_rejected_with_the_reason(text, problem):
    with pytest.raises(ParseError, match=problem.replace("[", r"\[")):
        parse_characters(text, NAMES)


# ---- state answers -------------------------------------------------------------------------

VALID_STATE = "<S>Girl</S><MD>run</MD><EV>Forest</EV><MA>slowly</MA><SC>0</SC><ET>1</ET><ST>-1</ST>"


def test_the_prompts_own_example_parses_into_typed_values():
    assert parse_state(VALID_STATE) == StateAnswer("Girl", "run", "Forest", "slowly", 0, 1, -1)


def test_state_answer_variants_are_accepted():
    text = (
        "Here is the description:\n<S> Girl </S>\n<MD>rides a dragon over the desert.</MD>"
        "<EV>'sky'</EV><MA>Quickly</MA><SC>1</SC><ET>0</ET><ST>+1</ST> Hope this helps!"
    )
    answer = parse_state(text)
    assert answer == StateAnswer(
        "Girl", "rides a dragon over the desert", "sky", "quickly", 1, 0, 1
    )


@pytest.mark.parametrize(
    "replace, problem",
    [
        (("<SC>0</SC>", "<SC>2</SC>"), "<SC> must be one of"),
        (("<ET>1</ET>", "<ET>yes</ET>"), "<ET> must be one of"),
        (("<ST>-1</ST>", "<ST>0</ST>"), "<ST> must be one of"),
        (("<S>Girl</S>", "<S>young girl</S>"), "<S> must be one word"),
        (("<EV>Forest</EV>", "<EV>snowy forest</EV>"), "<EV> must be one word"),
        (("<MA>slowly</MA>", "<MA>slow and steady</MA>"), "<MA> must be one adverb"),
        (("<MA>slowly</MA>", "<MA>run</MA>"), "not an adverb"),
        (("<MD>run</MD>", "<MD>run 2 km</MD>"), "non-words"),
        (("<MD>run</MD>", "<MD>" + "very " * 9 + "run</MD>"), "words \\(at most"),
        (("<ST>-1</ST>", ""), "missing tags \\['ST'\\]"),  # partial
        (("<SC>0</SC>", "<SC>0</SC><SC>1</SC>"), "twice with different values"),
    ],
)
def test_out_of_domain_or_partial_state_is_rejected(replace, problem):
    with pytest.raises(ParseError, match=problem):
        parse_state(VALID_STATE.replace(*replace))


def test_empty_or_tagless_state_is_rejected():
    for text in ("", "I cannot see the image.", "<S>Girl"):
        with pytest.raises(ParseError):
            parse_state(text)


def test_instruction_names_matched_characters_else_the_subject():
    state = parse_state(VALID_STATE.replace("<MD>run</MD>", "<MD>flying on broomstick</MD>"))
    assert (
        instruction_text(["Qiqi"], state)
        == "Character: Qiqi; Motion: slowly flying on broomstick; Background: Forest."
    )
    assert instruction_text([], state).startswith("Character: Girl; ")
    assert instruction_text(["Sintel", "Scales"], state).startswith("Character: Sintel, Scales; ")


# ---- prompts -------------------------------------------------------------------------------


def test_shipped_prompts_load_with_version_hash_and_slots():
    assert {"character_match", "game_state"} <= set(available_prompts())
    character, state = load_prompt("character_match"), load_prompt("game_state")
    assert (character.num_images, state.num_images) == (2, 1)
    assert character.placeholders == {"num_frames"} and state.placeholders == {"motion_level"}
    assert character.version == state.version == "paper-v1"
    assert "[Number]2[Index]1,3" in character.text  # the paper's text, verbatim around the slots
    filled = state.fill(motion_level=4)
    assert "movement level <ML>4</ML> respectively" in filled and "$" not in filled
    assert character.fingerprint.startswith("character_match@paper-v1#")


def test_prompt_hash_follows_the_sent_text_not_the_comments(tmp_path):
    base = "# name: p\n# version: v1\n---\nSay <image> $x\n"
    commented = "# name: p\n# version: v1\n# a new comment\n---\nSay <image> $x\n"
    changed = "# name: p\n# version: v1\n---\nSay <image> now $x\n"
    assert parse_prompt(base, "a").sha256 == parse_prompt(commented, "b").sha256
    assert parse_prompt(base, "a").sha256 != parse_prompt(changed, "c").sha256
    path = tmp_path / "custom.txt"
    path.write_text(changed)
    assert load_prompt(path).text == "Say <image> now $x"


def test_prompt_errors_name_the_file(tmp_path):
    with pytest.raises(PromptError, match="nosuch.txt: no such prompt file"):
        load_prompt("nosuch")
    bad = tmp_path / "bad.txt"
    bad.write_text("# name: bad\nno separator\n")
    with pytest.raises(PromptError, match="bad.txt: missing the '---' line"):
        load_prompt(bad)
    with pytest.raises(PromptError, match="no value given for \\$motion_level"):
        load_prompt("game_state").fill()


# ---- pictures ------------------------------------------------------------------------------


def test_frames_are_sampled_evenly_with_both_ends():
    assert sample_indices(16, 8) == [0, 2, 4, 6, 9, 11, 13, 15]
    assert sample_indices(16, 4) == [0, 5, 10, 15]
    assert sample_indices(3, 8) == [0, 1, 2]


@pytest.mark.slow
def test_frame_grid_holds_the_sampled_frames_in_order(clip_videos):
    from core.video import decode_mp4

    video = clip_videos[1][1]
    grid = clip_frame_grid(video, num_frames=8, frame_height=120, columns=4)
    gap = FRAME_GAP
    assert grid.size == (4 * 180 + 3 * gap, 2 * 120 + gap)
    frames = decode_mp4(video)
    # each cell is its frame scaled down: compare mean colours, cell by cell
    for cell, index in enumerate(sample_indices(len(frames), 8)):
        x, y = (cell % 4) * (180 + gap), (cell // 4) * (120 + gap)
        cell_mean = sum(
            grid.crop((x, y, x + 180, y + 120)).resize((1, 1), Image.BOX).getpixel((0, 0))
        )
        frame_mean = frames[index].reshape(-1, 3).mean(axis=0).sum()
        assert abs(cell_mean - frame_mean) < 12


def test_reference_sheet_keeps_order_and_changes_digest_with_content(tmp_path):
    sheet = build_reference_sheet(SINTEL_REFERENCES)
    assert sheet.names == ("Sintel", "Scales")
    assert sheet.image.height > sheet.image.width / 4  # one protagonist per row
    swapped = build_reference_sheet(SINTEL_REFERENCES[::-1])
    assert swapped.digest != sheet.digest
    with pytest.raises(FileNotFoundError, match="missing.png: reference image of 'Nobody'"):
        build_reference_sheet([("Nobody", [tmp_path / "missing.png"])])
    with pytest.raises(ValueError, match="'Nobody' has no reference images"):
        build_reference_sheet([("Nobody", [])])
