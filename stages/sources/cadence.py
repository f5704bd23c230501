"""What the places of mended frames in the cycle of five say (issue 35): telecine, true
interlace, or not enough to tell.

A combed frame that a neighbour's field mends is two pictures woven together, each whole in a
neighbouring frame. Telecine makes such frames; so does truly interlaced video of held drawings
(limited animation, drawn or composited at the field rate), where a drawing that changes
between a frame's two fields combs that frame exactly as pulldown does. Only where the frames
sit tells the two apart: telecine repeats itself every five frames, so its mended frames keep to
two neighbouring places of the five (3:2) or to one (2:3:3:2, or 3:2 over drawings held for two
film pictures), while drawings held for a number of fields that follows no 3:2 cycle (three
fields each, 3-2-4 fields in turn, a 25-picture source spread over 59.94 fields) comb frames at
every place.

A place is a frame's index modulo five, counted from the film's first frame. An edit made after
the telecine (the usual case in TV anime) starts a new cycle at another place, so the mended
frames of a run are read as stretches, in order, each keeping to one pair of neighbouring places;
a run may hold one edit (two stretches), never two (its 40 frames are 1.3 s).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

CADENCE = 5  # telecine repeats itself every five frames
CYCLE_EVIDENCE = 3  # mended frames in one stretch that show a cycle (two could be any places)
CADENCE_EVIDENCE = 4  # mended frames a run needs before its places name the cadence

TELECINED, INTERLACED, UNSURE = "telecined", "interlaced", "unsure"


def stretches(mended: Iterable[int]) -> list[list[int]]:
    """The places of the mended frames `mended` (frame indices, in order), cut into stretches
    that each keep to one pair of neighbouring places (4 and 0 are neighbours): a new stretch
    starts at the first frame that the stretch so far cannot take."""
    out: list[list[int]] = []
    for index in mended:
        place = index % CADENCE
        if out and _one_pair(set(out[-1]) | {place}):
            out[-1].append(place)
        else:
            out.append([place])
    return out


def cycle_kind(mended: Sequence[int]) -> str:
    """What a run's mended frames (indices, in order) say: `telecined` when they keep to one
    cycle (one stretch of at least CYCLE_EVIDENCE frames, or two such stretches: an edit in the
    run), `interlaced` when no telecine with at most one edit puts them where they are (three
    stretches or more), `unsure` otherwise (too few frames to show a cycle)."""
    parts = stretches(mended)
    if len(parts) >= 3:
        return INTERLACED
    if parts and all(len(part) >= CYCLE_EVIDENCE for part in parts):
        return TELECINED
    return UNSURE


def cadence_name(runs_mended: Iterable[Sequence[int]]) -> str:
    """3:2 combs two neighbouring frames in every five, 2:3:3:2 one. A held drawing leaves one
    of 3:2's two whole, so one place alone says 2:3:3:2 only when every run with at least
    CADENCE_EVIDENCE mended frames shows it; a run whose frames sit at more places than two
    neighbours (an edit in it) gives `broken`. Places are counted per run: an edit between runs
    may shift them."""
    names = set()
    for mended in runs_mended:
        if len(mended) < CADENCE_EVIDENCE:
            continue
        places = {index % CADENCE for index in mended}
        if not _one_pair(places):
            names.add("broken")
        else:
            names.add("3:2" if len(places) == 2 else "2:3:3:2")
    if "broken" in names:
        return "broken"
    return "2:3:3:2" if names == {"2:3:3:2"} else "3:2"


def _one_pair(places: set[int]) -> bool:
    """Whether the places are one place, or two neighbouring places of the five."""
    if len(places) != 2:
        return len(places) <= 1
    low, high = sorted(places)
    return high - low in (1, CADENCE - 1)
