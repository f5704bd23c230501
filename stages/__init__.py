"""Pipeline stages, none of them aware of Ray: the contracts and the clip stage registry are in
stages/base.py. Beside them the stages that cut a film (probe, crop, clips, motion, encode,
transitions), and rooms: `scenes/` (cuts, black runs, blends), `sources/` (field structure
and restoration, field-coded streams, the shared film samples), `burned_in/` (subtitles, logos,
edge text, player bars, the text detector), `quality/` (the quality stage and the reject
decision), `scoring/` (the scores users filter by), `captioning/`, `motion_levels/`."""

from core.moved import keep_old_paths

# Modules that moved into rooms (issue 37) after they had been public: their old paths keep working.
keep_old_paths(
    {
        "stages.overlays": "stages.burned_in.overlays",
        "stages.in_world_text": "stages.burned_in.in_world_text",
    }
)
