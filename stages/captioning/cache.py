"""Finished captions, kept across runs in one append-only JSON-lines file per film.

The key (see `CaptionStage.cache_key`) covers the clip id, the model, the prompts' fingerprints
(version and text hash), the clip's motion level (it is part of the state prompt) and the
pictures' settings and reference sheet. A rerun finds its captions here and asks the model
nothing; a changed prompt, model, sheet or level is a new key and is captioned again. Only
successful captions are kept: a failed clip is tried again on the next run.

Lines are appended and flushed after every batch, so an interrupted run resumes where it stopped.
A torn last line (a crash mid-write) is skipped and counted, never trusted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from core.record import Clip
from core.vocabulary import CAPTION_COLUMNS


class CaptionCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.entries: dict[str, dict] = {}
        self.unreadable_lines = 0
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        with self.path.open(encoding="utf-8") as handle:
            for line in handle:
                try:
                    entry = json.loads(line)
                    self.entries[entry["key"]] = entry["caption"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    self.unreadable_lines += 1

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def apply(self, key: str, clip: Clip) -> None:
        for name, value in self.entries[key].items():
            setattr(clip, name, value)

    def put_many(self, items: list[tuple[str, Clip]]) -> None:
        lines = []
        for key, clip in items:
            caption = {name: getattr(clip, name) for name in CAPTION_COLUMNS}
            self.entries[key] = caption
            lines.append(
                json.dumps(
                    {"key": key, "clip_id": clip.clip_id, "caption": caption}, ensure_ascii=False
                )
            )
        if not lines:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            if self._ends_torn():
                handle.write("\n")  # keep the torn line apart from the new ones
            handle.write("\n".join(lines) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _ends_torn(self) -> bool:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return False
        with self.path.open("rb") as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
