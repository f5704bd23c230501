"""The captioning prompts, as versioned text files, loaded by name.

A prompt file is a header of `# key: value` lines (name, version, source, notes), a line of
dashes, then the text sent to the model. `<image>` marks where an image goes; `$name` marks a
value filled per clip (string.Template syntax, so a missing value is an error, never a silent
blank). The hash covers the sent text only, so editing a comment re-captions nothing, while any
change to what the model reads changes the hash and with it the caption cache key.
"""

from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent
IMAGE_SLOT = "<image>"
_SEPARATOR = "---"


class PromptError(ValueError):
    pass


@dataclass(frozen=True)
class Prompt:
    name: str
    version: str
    text: str  # the template sent to the model, slots unfilled
    source: str  # the file it came from

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def fingerprint(self) -> str:
        """`name@version#hash12`: what a caption records about the prompt that made it."""
        return f"{self.name}@{self.version}#{self.sha256[:12]}"

    @property
    def num_images(self) -> int:
        return self.text.count(IMAGE_SLOT)

    @property
    def placeholders(self) -> set[str]:
        return {
            m.group("named") or m.group("braced")
            for m in string.Template.pattern.finditer(self.text)
            if m.group("named") or m.group("braced")
        }

    def fill(self, **values) -> str:
        try:
            return string.Template(self.text).substitute(**{k: str(v) for k, v in values.items()})
        except KeyError as exc:
            raise PromptError(f"{self.source}: no value given for ${exc.args[0]}") from None


def load_prompt(name_or_path: str | Path) -> Prompt:
    """`character_match` reads prompts/character_match.txt; a path (with a / or .txt) reads that file."""
    text = str(name_or_path)
    path = Path(text) if ("/" in text or text.endswith(".txt")) else PROMPTS_DIR / f"{text}.txt"
    if not path.is_file():
        known = ", ".join(available_prompts())
        raise PromptError(f"{path}: no such prompt file (prompts shipped here: {known})")
    return parse_prompt(path.read_text(encoding="utf-8"), source=str(path))


def available_prompts() -> list[str]:
    return sorted(p.stem for p in PROMPTS_DIR.glob("*.txt"))


def parse_prompt(content: str, source: str) -> Prompt:
    header, sep, body = content.partition(f"\n{_SEPARATOR}\n")
    if not sep:
        raise PromptError(f"{source}: missing the '{_SEPARATOR}' line between header and prompt")
    fields = _header_fields(header)
    for key in ("name", "version"):
        if not fields.get(key):
            raise PromptError(f"{source}: header has no '# {key}:' line")
    body = body.strip("\n")
    if not body.strip():
        raise PromptError(f"{source}: the prompt text is empty")
    return Prompt(name=fields["name"], version=fields["version"], text=body, source=source)


def _header_fields(header: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in header.splitlines():
        key, colon, value = line.lstrip("# ").partition(":")
        # continuation lines (indented) and free comments have no "key:" of their own
        if colon and line.startswith("# ") and not line.startswith("#  ") and key.isidentifier():
            fields.setdefault(key, value.strip())
    return fields
