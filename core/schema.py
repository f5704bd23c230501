"""The explicit, versioned Arrow schema of a clip shard.

Readers check `SCHEMA_VERSION` in the file metadata. Bump it when a column changes meaning or type;
adding a nullable column is a minor bump. 2.0 (issue 13): the quality columns (`usable`, never
null, `reject_reasons`, `duplicate_of`, `quality_*`), and clips cut at every cut and fade. `tests/test_shards.py` keeps this list and
`core.record.Clip` in step.
"""

from __future__ import annotations

import pyarrow as pa

from core.vocabulary import CAPTION_FIELDS, CaptionField

SCHEMA_VERSION = "2.4"  # 2.1: overlay_subtitle_area, overlay_logo_share (issue 28); 2.2: camera_*, clarity (issue 36); 2.3: combing (issue 35); 2.4: blended (issue 35)

_ARROW_TYPES = {
    "string": pa.string(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "list<string>": pa.list_(pa.string()),
}


def caption_arrow_field(field: CaptionField) -> pa.Field:
    """The nullable Arrow field of a caption column (core/vocabulary.py names its type)."""
    return pa.field(field.name, _ARROW_TYPES[field.arrow])


CAPTION_SCHEMA_FIELDS = [caption_arrow_field(f) for f in CAPTION_FIELDS]

_MEDIA_COLUMNS = ("video", "first_frame")

CLIP_SCHEMA = pa.schema(
    [
        pa.field("clip_id", pa.string(), nullable=False),
        pa.field("film_id", pa.string(), nullable=False),
        pa.field("film_name", pa.string(), nullable=False),
        pa.field("ip", pa.string(), nullable=False),
        pa.field("segment_index", pa.int32(), nullable=False),
        pa.field("scene_index", pa.int32(), nullable=False),
        pa.field("clip_index", pa.int32(), nullable=False),
        pa.field("start_frame", pa.int64(), nullable=False),
        pa.field("end_frame", pa.int64(), nullable=False),
        pa.field("start_time", pa.float64(), nullable=False),
        pa.field("end_time", pa.float64(), nullable=False),
        pa.field("frame_indices", pa.list_(pa.int64()), nullable=False),
        pa.field("crop_x", pa.int32(), nullable=False),
        pa.field("crop_y", pa.int32(), nullable=False),
        pa.field("crop_w", pa.int32(), nullable=False),
        pa.field("crop_h", pa.int32(), nullable=False),
        pa.field("height", pa.int32(), nullable=False),
        pa.field("width", pa.int32(), nullable=False),
        pa.field("num_frames", pa.int32(), nullable=False),
        pa.field("fps", pa.float64(), nullable=False),
        pa.field("source_fps", pa.float64(), nullable=False),
        pa.field("video", pa.binary()),
        pa.field("first_frame", pa.binary()),
        pa.field("motion_scope", pa.float64()),
        pa.field("motion_level", pa.int8()),
        pa.field("motion_backend", pa.string()),
        pa.field("motion_levels_version", pa.string()),
        *CAPTION_SCHEMA_FIELDS,
        pa.field("usable", pa.bool_(), nullable=False),
        pa.field("reject_reasons", pa.list_(pa.string()), nullable=False),
        pa.field("duplicate_of", pa.string()),
        pa.field("quality_luma_mean", pa.list_(pa.float32())),
        pa.field("quality_luma_peak", pa.list_(pa.float32())),
        pa.field("quality_text_area", pa.float32()),
        pa.field("quality_hashes", pa.list_(pa.int64())),
        pa.field("quality_version", pa.string()),
        pa.field("overlay_subtitle_area", pa.float32()),
        pa.field("overlay_logo_share", pa.float32()),
        pa.field("combing", pa.float32()),
        pa.field("blended", pa.float32()),
        pa.field("camera_motion", pa.string()),
        pa.field("camera_tx", pa.float32()),
        pa.field("camera_ty", pa.float32()),
        pa.field("camera_zoom", pa.float32()),
        pa.field("camera_rotation", pa.float32()),
        pa.field("camera_fit", pa.float32()),
        pa.field("clarity", pa.float32()),
        pa.field("status", pa.string(), nullable=False),
        pa.field("error", pa.string()),
    ],
    metadata={"animegamer.schema_version": SCHEMA_VERSION},
)

# What a manifest row adds to a clip row: the usability once a person's review decision is taken
# into account (pipeline/data/review.py), and that decision. Columns the shards already carry are not
# added twice.
_REVIEWED_COLUMNS = [
    pa.field("usable", pa.bool_()),
    pa.field("reject_reasons", pa.list_(pa.string())),
    pa.field("review_decision", pa.string()),
]

# The notebook-friendly manifest: every column but the media bytes, as reviewed.
MANIFEST_SCHEMA = pa.schema(
    [f for f in CLIP_SCHEMA if f.name not in _MEDIA_COLUMNS]
    + [f for f in _REVIEWED_COLUMNS if f.name not in CLIP_SCHEMA.names],
    metadata=CLIP_SCHEMA.metadata,
)

# One row per 2-second window (or whole scene) that did not become a clip, with the reason.
DROP_SCHEMA = pa.schema(
    [
        pa.field("film_id", pa.string(), nullable=False),
        pa.field("segment_index", pa.int32(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("start_frame", pa.int64(), nullable=False),
        pa.field("end_frame", pa.int64(), nullable=False),
        pa.field("start_time", pa.float64(), nullable=False),
        pa.field("end_time", pa.float64(), nullable=False),
        pa.field("detail", pa.string()),
    ],
    metadata=CLIP_SCHEMA.metadata,
)


def rows_to_table(rows: list[dict], schema: pa.Schema = CLIP_SCHEMA) -> pa.Table:
    """Build a table with exactly `schema` (missing keys become nulls, extra keys are an error)."""
    names = set(schema.names)
    extra = {k for row in rows for k in row} - names
    if extra:
        raise ValueError(f"rows carry columns the schema does not declare: {sorted(extra)}")
    return pa.Table.from_pylist(
        [{n: row.get(n) for n in schema.names} for row in rows], schema=schema
    )
