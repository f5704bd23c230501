"""What a report shows (`animegamer report`'s options), apart from pipeline/inspection/report.py so that the
command can state its defaults and refuse bad arguments before the report's imports (pandas,
matplotlib: about a second)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ReportOptions:
    max_previews: int = 48
    """Animated previews per film, evenly spaced over the film (a 2-hour film has ~3,600 clips)."""
    max_rejected_previews: int = 6
    """Animated previews per reject reason and film, evenly spaced over the film."""
    preview_width: int = 288
    """Preview width in pixels (a 720-pixel clip is shown at 288x192 by default)."""
    ip: str | None = None
    """Only films of this IP (from summary.json or the manifest's ip column)."""
