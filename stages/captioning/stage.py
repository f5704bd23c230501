"""Captioning with InternVL (issue 4): who is on screen, what they do, where, how, and the effects.

Per clip, two prompts from the paper (prompts/): character matching shows the protagonists'
reference sheet and the clip's frame grid and asks for the indices of those present; the state
prompt shows the grid with the clip's motion level and asks for subject, motion, environment,
adverb, social, entertainment and stamina. The two answers are independent, so both go to the
engine in the same batch. Answers are parsed and domain-checked (stages/captioning/parsing.py);
invalid ones are asked again with sampling, up to `max_retries` times, then the clip is recorded
as caption_failed with the raw text kept.

caption_status is one of: ok, caption_failed, pending (no model configured), or skipped_<why>
(skipped_unusable: the quality stage rejected the clip, see docs/quality.md; skipped_clip_error,
skipped_no_video, skipped_no_motion_level, skipped_bad_video) for clips that are not worth
captioning or the prompts cannot be filled for. Every clip gets a status; counts per status land in the film's summary.json.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from core.device import resolve_device, uses_cuda
from core.record import (
    CAPTION_FAILED,
    CAPTION_OK,
    CAPTION_PENDING,
    SKIPPED_BAD_VIDEO,
    SKIPPED_CLIP_ERROR,
    SKIPPED_NO_MOTION_LEVEL,
    SKIPPED_NO_VIDEO,
    SKIPPED_UNUSABLE,
    STATUS_OK,
    Clip,
)
from core.resources import Resources
from core.settings import Settings, check_choice
from core.vocabulary import CAPTION_COLUMNS, STATE_NAMES
from stages.base import ClipStage
from stages.captioning.engines import ENGINES, EngineError, Request, make_engine
from stages.captioning.parsing import (
    CharacterAnswer,
    ParseError,
    StateAnswer,
    instruction_text,
    parse_characters,
    parse_state,
)

if TYPE_CHECKING:  # loaded lazily at run time (see prepare())
    from PIL import Image

    from prompts import Prompt
    from stages.captioning.images import ReferenceSheet

CAPTION_EXECUTORS = ("auto", "ray", "local")
LMDEPLOY_BACKENDS = ("turbomind", "pytorch")

CHARACTERS, STATE = "characters", "state"
# Consecutive engine errors (not invalid answers) after which the engine is taken to be down.
ENGINE_ERRORS_BEFORE_STOP = 24


@dataclass
class CaptionConfig(Settings):
    content_fields = ()  # captions are a later pass over the shards: the cut is the same
    model: str | None = None
    """InternVL checkpoint: a local folder (engines transformers, lmdeploy), a hub name where a
    network exists, or the served model name (engine openai). None: captions stay pending."""
    engine: str = "transformers"
    """'transformers' (CPU or GPU), 'lmdeploy' (GPU, optional install, Ray actors) or 'openai'
    (an OpenAI-compatible endpoint: lmdeploy api_server, vLLM)."""
    endpoint: str | None = None
    """Base URL of the OpenAI-compatible endpoint (engine openai), e.g. http://host:23333/v1."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the endpoint's API key, if it needs one."""
    num_frames: int = 8
    """Frames sampled evenly over the clip and shown to the model as one grid picture."""
    frame_height: int = 240
    """Height of each frame in the grid, in pixels (480x720 frames become 240x360)."""
    grid_columns: int = 4
    """Frames per row of the grid."""
    character_prompt: str = "character_match"
    """Prompt name under prompts/ (or a path to a prompt file) for character matching."""
    state_prompt: str = "game_state"
    """Prompt name under prompts/ (or a path to a prompt file) for the game state."""
    max_retries: int = 2
    """Times an invalid answer is asked again (with sampling) before the clip is caption_failed."""
    retry_temperature: float = 0.7
    """Sampling temperature of retries (the first answer is greedy, so a retry must sample)."""
    max_new_tokens: int = 96
    """Longest answer generated: a state answer is 40 to 60 tokens, and models add chatter."""
    batch_size: int = 8
    """Clips per engine call (two prompts each)."""
    trust_remote_code: bool = False
    """Let transformers run code shipped with the checkpoint. Off: only native classes load."""
    device: str = "auto"
    """Engine transformers: 'auto' (CUDA when present), 'cpu', 'cuda', 'cuda:1'."""
    dtype: str = "auto"
    """Engine transformers: 'auto' (bfloat16 on CUDA, float32 on CPU) or a torch dtype name."""
    lmdeploy_backend: str = "turbomind"
    """Engine lmdeploy: 'turbomind' or 'pytorch'."""
    tensor_parallel: int = 1
    """Engine lmdeploy: GPUs per model replica (one Ray actor each)."""
    session_len: int = 16384
    """Engine lmdeploy: context length; a request takes under 3,000 tokens with InternVL."""
    executor: str = "auto"
    """'auto' (Ray GPU actors for lmdeploy, this process otherwise), 'ray' or 'local'."""
    workers: int | None = None
    """Ray actors (model replicas); None: as many as the cluster's GPUs allow."""
    concurrency: int = 8
    """Engine openai: requests in flight at once."""
    request_timeout: float = 300.0
    """Engine openai: seconds before a request is abandoned (and counted as a failed attempt)."""
    include_unusable: bool = False
    """Caption clips the quality stage rejected too (usable = false). Off: they are left out,
    with caption_status skipped_unusable, and cost no model time."""

    def validate(self) -> None:
        check_choice("caption", "engine", self.engine, ENGINES)
        check_choice("caption", "executor", self.executor, CAPTION_EXECUTORS)
        check_choice("caption", "lmdeploy_backend", self.lmdeploy_backend, LMDEPLOY_BACKENDS)


class CaptionStage(ClipStage):
    name = "caption"

    def __init__(
        self,
        config: CaptionConfig | None = None,
        protagonists: Sequence[tuple[str, Sequence[str | Path]]] | None = None,
        engine=None,
    ):
        """`protagonists`: (name, [reference image paths]) in sheet order; None or empty skips
        character matching. `engine`: an already-built CaptionEngine (else made from config)."""
        self.config = _with_resolved_device(config or CaptionConfig())
        self.protagonists = [
            (name, [str(p) for p in paths]) for name, paths in (protagonists or [])
        ]
        self.stats: Counter = Counter()
        self._engine = engine
        self._engine_loaded = False
        self._prompts: dict[str, Prompt] | None = None
        self._sheet: ReferenceSheet | None = None
        self._engine_errors_in_a_row = 0
        self.resources = _resources(self.config)

    # ---- loading -----------------------------------------------------------------------

    def take_stats(self) -> Counter[str]:
        """Clips per caption status and engine requests since the last call."""
        taken, self.stats = self.stats, Counter()
        return taken

    def prepare(self) -> None:
        """Prompts and reference sheet: cheap, and all a cache lookup needs."""
        if self._prompts is not None:
            return
        from prompts import load_prompt
        from stages.captioning.images import build_reference_sheet

        self._prompts = {STATE: load_prompt(self.config.state_prompt)}
        if self.protagonists:
            self._prompts[CHARACTERS] = load_prompt(self.config.character_prompt)
            self._sheet = build_reference_sheet(self.protagonists)

    def _loaded_prompts(self) -> dict[str, Prompt]:
        self.prepare()
        assert self._prompts is not None, "prepare() loads the prompts"
        return self._prompts

    def setup(self) -> None:
        self.prepare()
        if not self.config.model or self._engine_loaded:
            return
        if self._engine is None:
            self._engine = make_engine(self.config)
        self._engine.load()
        self._engine_loaded = True

    @property
    def prompt_version(self) -> str:
        prompts = self._loaded_prompts()
        return "+".join(prompts[k].fingerprint for k in (CHARACTERS, STATE) if k in prompts)

    def cache_key(self, clip: Clip) -> str | None:
        """Everything that changes the answer for this clip; None when it cannot be captioned."""
        if self._skip_reason(clip) or not self.config.model:
            return None
        self.prepare()
        # the engine (and an endpoint's address) decide which weights answer to a model name
        served_by = self.config.engine + (
            f"@{self.config.endpoint}" if self.config.engine == "openai" else ""
        )
        parts = [
            clip.clip_id,
            self.config.model,
            served_by,
            self.prompt_version,
            str(clip.motion_level),
            f"{self.config.num_frames}x{self.config.frame_height}/{self.config.grid_columns}",
            self._sheet.digest if self._sheet else "no-sheet",
        ]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()

    # ---- captioning --------------------------------------------------------------------

    def process(self, clip: Clip) -> Clip:
        return self.process_batch([clip])[0]

    def process_batch(self, clips: list[Clip]) -> list[Clip]:
        if not self.config.model:
            for clip in clips:
                clip.caption_status = clip.caption_status or (
                    CAPTION_PENDING
                    if clip.usable or self.config.include_unusable
                    else SKIPPED_UNUSABLE
                )
            return clips
        self.setup()
        ids = [clip.clip_id for clip in clips]
        if len(set(ids)) != len(ids):  # answers are bound by clip id
            raise ValueError(f"a caption batch holds a clip id twice: {ids}")
        jobs = []
        for clip in clips:
            _clear_caption(clip)  # a failed re-caption must not keep an older caption's values
            job = self._job(clip)
            if job is not None:
                jobs.append(job)
        self._answer(jobs)
        for job in jobs:
            self._finish(job)
        self.stats.update(c.caption_status for c in clips)
        return clips

    def _skip_reason(self, clip: Clip) -> str | None:
        if clip.status != STATUS_OK:
            return SKIPPED_CLIP_ERROR
        if not clip.usable and not self.config.include_unusable:
            return SKIPPED_UNUSABLE
        if not clip.video:
            return SKIPPED_NO_VIDEO
        if clip.motion_level is None:
            return SKIPPED_NO_MOTION_LEVEL
        return None

    def _job(self, clip: Clip) -> _Job | None:
        """The clip's questions, or None with the reason set as its caption_status."""
        from stages.captioning.images import clip_frame_grid

        clip.caption_status = self._skip_reason(clip)
        if clip.caption_status:
            return None
        assert clip.video is not None, "_skip_reason() skips a clip without video"
        try:
            grid = clip_frame_grid(
                clip.video,
                self.config.num_frames,
                self.config.frame_height,
                self.config.grid_columns,
            )
        except Exception as exc:  # a corrupt video is this clip's problem, not the batch's
            clip.caption_status = SKIPPED_BAD_VIDEO
            clip.caption_raw = json.dumps({"problems": {"video": [f"{type(exc).__name__}: {exc}"]}})
            return None
        return _Job(clip, grid, needs_characters=self._sheet is not None)

    def _answer(self, jobs: list[_Job]) -> None:
        """Ask every open question; ask again those answered invalidly, up to max_retries."""
        open_questions = [(job, kind) for job in jobs for kind in job.kinds()]
        for attempt in range(1 + self.config.max_retries):
            if not open_questions:
                return
            built = [self._request(job, kind, attempt) for job, kind in open_questions]
            requests = {r.key: question for r, question in zip(built, open_questions)}
            completions = self._engine.generate(built)
            self.stats["requests"] += len(built)
            self.stats["retried_requests"] += len(built) if attempt else 0
            by_key = _index_completions(completions, requests)
            self._watch_engine_errors(by_key.values(), EngineError)
            open_questions = [
                (job, kind)
                for key, (job, kind) in requests.items()
                if not job.take(kind, by_key.get(key), self._sheet)
            ]

    def _watch_engine_errors(self, completions, error_type) -> None:
        """A dead engine (server down, broken checkpoint) fails every request: stop the run with
        its error instead of recording a whole film as caption_failed."""
        for completion in completions:
            if completion.error is None:
                self._engine_errors_in_a_row = 0
                continue
            self._engine_errors_in_a_row += 1
            if self._engine_errors_in_a_row >= ENGINE_ERRORS_BEFORE_STOP:
                raise error_type(
                    f"the caption engine failed on {self._engine_errors_in_a_row} "
                    f"requests in a row; last error: {completion.error}"
                )

    def _request(self, job: _Job, kind: str, attempt: int):
        prompt = self._loaded_prompts()[kind]
        images: tuple[Image.Image, ...]
        if kind == CHARACTERS:
            assert self._sheet is not None, "characters are asked about only with a sheet"
            text = prompt.fill(num_frames=self._frames_shown(job))
            images = (self._sheet.image, job.grid)
        else:
            text = prompt.fill(motion_level=job.clip.motion_level)
            images = (job.grid,)
        return Request(
            key=f"{job.clip.clip_id}/{kind}/{attempt}",
            text=text,
            images=images,
            temperature=0.0 if attempt == 0 else self.config.retry_temperature,
            max_new_tokens=self.config.max_new_tokens,
        )

    def _frames_shown(self, job: _Job) -> int:
        return min(self.config.num_frames, job.clip.num_frames or self.config.num_frames)

    def _finish(self, job: _Job) -> None:
        clip = job.clip
        clip.caption_model = self.config.model
        clip.prompt_version = self.prompt_version
        clip.caption_raw = json.dumps(job.raw_record(), ensure_ascii=False)
        if not job.complete():
            clip.caption_status = CAPTION_FAILED
            return
        state = job.state
        assert state is not None, "complete() checked it"
        characters = list(job.characters.names) if job.characters is not None else None
        clip.characters = characters
        clip.num_characters = len(characters) if characters is not None else None
        for name in STATE_NAMES:
            setattr(clip, name, getattr(state, name))
        clip.instruction = instruction_text(characters, state)
        clip.caption_status = CAPTION_OK


def _with_resolved_device(config: CaptionConfig) -> CaptionConfig:
    """The settings with caption.device's 'auto' resolved (core/device.py) where the engine takes
    a torch device, so that the GPU the stage reserves and the device its engine takes are one
    decision (a replica never takes a GPU it did not reserve)."""
    if config.engine != "transformers" or not config.model or config.device != "auto":
        return config
    return replace(config, device=resolve_device(config.device))


def _resources(config: CaptionConfig) -> Resources:
    """What one caption worker reserves; set once in __init__ (the config never changes after)."""
    if config.engine == "lmdeploy":
        return Resources(cpus=1.0, gpus=float(config.tensor_parallel))
    if config.engine == "transformers" and config.model and uses_cuda(config.device):
        return Resources(cpus=1.0, gpus=1.0)
    return Resources(cpus=1.0, gpus=0.0)


def _clear_caption(clip: Clip) -> None:
    for name in CAPTION_COLUMNS:  # the columns this stage owns
        setattr(clip, name, None)


def _index_completions(completions, requests: dict) -> dict:
    """Completions by key. An answer to a request never made, or two answers to one request,
    means answers can no longer be bound to clips: stop rather than guess."""
    by_key = {}
    for completion in completions:
        if completion.key not in requests:
            raise EngineError(f"engine answered unknown request {completion.key!r}")
        if completion.key in by_key:
            raise EngineError(f"engine answered request {completion.key!r} twice")
        by_key[completion.key] = completion
    return by_key


class _Job:
    """One clip's questions, answers and attempts while it is being captioned."""

    def __init__(self, clip: Clip, grid, needs_characters: bool):
        self.clip = clip
        self.grid = grid
        self.needs_characters = needs_characters
        self.characters: CharacterAnswer | None = None
        self.state: StateAnswer | None = None
        self.raw: dict[str, str | None] = {}
        self.problems: dict[str, list[str]] = {}

    def kinds(self) -> list[str]:
        return [CHARACTERS, STATE] if self.needs_characters else [STATE]

    def take(self, kind: str, completion, sheet) -> bool:
        """Record an answer; True when it was valid."""
        problems = self.problems.setdefault(kind, [])
        if completion is None:
            problems.append("no answer from the engine")
            return False
        self.raw[kind] = completion.text
        if completion.error:
            problems.append(f"engine error: {completion.error}")
            return False
        try:
            if kind == CHARACTERS:
                self.characters = parse_characters(completion.text, list(sheet.names))
            else:
                self.state = parse_state(completion.text)
        except ParseError as exc:
            problems.append(str(exc))
            return False
        return True

    def complete(self) -> bool:
        return self.state is not None and (self.characters is not None or not self.needs_characters)

    def raw_record(self) -> dict:
        """The last raw answer per prompt, and every problem met on the way (for caption_failed)."""
        record: dict[str, object] = {kind: self.raw.get(kind) for kind in self.kinds()}
        record["attempts"] = {
            kind: len(self.problems.get(kind, [])) + (1 if self._valid(kind) else 0)
            for kind in self.kinds()
        }
        problems = {k: v for k, v in self.problems.items() if v}
        if problems:
            record["problems"] = problems
        return record

    def _valid(self, kind: str) -> bool:
        return (self.characters if kind == CHARACTERS else self.state) is not None
