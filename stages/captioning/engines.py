"""Engines that answer caption prompts, behind one interface.

An engine takes a list of `Request`s (prompt text with `<image>` slots, the images, sampling
settings, and a key) and returns one `Completion` per request, carrying the same key. The caller
binds answers to clips by key only, so an engine may answer in any order (a server finishes
requests out of order; lmdeploy batches them). A request that fails inside the engine comes back
as a Completion with `error` set, so one bad request never loses its neighbours.

- `transformers`: InternVLForConditionalGeneration from a local checkpoint (or a hub name where a
  network exists); CPU or GPU; left-padded batches.
- `lmdeploy`: lmdeploy.pipeline (TurboMind or PyTorch engine), the production path on GPUs. An
  optional install: the import fails with the command that installs it.
- `openai`: any OpenAI-compatible chat endpoint (`lmdeploy serve api_server`, vLLM, ...), with a
  bounded number of requests in flight.
"""

from __future__ import annotations

import base64
import io
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from core.device import DeviceError, pick_device
from prompts import IMAGE_SLOT

if TYPE_CHECKING:  # an engine is handed images; it never opens one
    from PIL import Image

ENGINES = ("transformers", "lmdeploy", "openai")  # the choices of caption.engine
LMDEPLOY_REQUIREMENT = "lmdeploy>=0.10"


class EngineError(RuntimeError):
    pass


@dataclass(frozen=True)
class Request:
    key: str
    text: str  # with one IMAGE_SLOT per image, in order
    images: tuple[Image.Image, ...] = field(repr=False)
    temperature: float = 0.0  # 0: greedy
    max_new_tokens: int = 64

    def __post_init__(self):
        if self.text.count(IMAGE_SLOT) != len(self.images):
            raise ValueError(
                f"request {self.key}: {self.text.count(IMAGE_SLOT)} image slots "
                f"but {len(self.images)} images"
            )


@dataclass(frozen=True)
class Completion:
    key: str
    text: str | None
    error: str | None = None


class CaptionEngine(ABC):
    """Loads in `load()` (once per worker; calling it again does nothing, so one loaded engine
    can serve several films), answers in `generate()`."""

    def load(self) -> None:  # noqa: B027 - optional hook: most engines load lazily or not at all
        pass

    @abstractmethod
    def generate(self, requests: list[Request]) -> list[Completion]:
        """One Completion per request, same keys, any order."""


def make_engine(config) -> CaptionEngine:
    """The engine named by `config.engine` (a CaptionConfig), not yet loaded."""
    if config.engine not in ENGINES:
        raise EngineError(f"caption.engine={config.engine!r}: choose one of {', '.join(ENGINES)}")
    if not config.model:
        raise EngineError("caption.model is not set: no model to caption with")
    if config.engine == "transformers":
        return TransformersEngine(config)
    if config.engine == "lmdeploy":
        return LmdeployEngine(config)
    return OpenAIEngine(config)


def _by_sampling(requests: list[Request]):
    """Groups of requests sharing temperature and length: one generate call each."""
    order = sorted(requests, key=lambda r: (r.temperature, r.max_new_tokens))
    for settings, group in groupby(order, key=lambda r: (r.temperature, r.max_new_tokens)):
        yield settings, list(group)


def _failed(requests: list[Request], exc: BaseException) -> list[Completion]:
    return [Completion(r.key, None, f"{type(exc).__name__}: {exc}") for r in requests]


# ---- transformers ------------------------------------------------------------------------


class TransformersEngine(CaptionEngine):
    def __init__(self, config):
        self.config = config
        self.model = None
        self.processor = None

    def load(self) -> None:
        if self.model is not None:
            return
        _check_local_path(self.config.model)  # before transformers' import, which takes seconds
        from core.compat import ensure_torchvision_importable

        ensure_torchvision_importable()  # the InternVL image processor imports torchvision
        import torch
        from transformers import AutoConfig, AutoProcessor, InternVLForConditionalGeneration

        source, remote = self.config.model, self.config.trust_remote_code
        try:
            model_config = AutoConfig.from_pretrained(source, trust_remote_code=remote)
        except (OSError, ValueError) as exc:
            raise EngineError(_load_problem(source, exc)) from exc
        if model_config.model_type != "internvl":
            raise EngineError(
                f"{source}: model type {model_config.model_type!r} is not the transformers-native "
                "InternVL ('internvl'); use a '-hf' checkpoint (e.g. OpenGVLab/InternVL3-8B-hf) "
                "with this engine, or serve the original checkpoint with engine lmdeploy/openai"
            )
        try:
            device = pick_device(self.config.device, "caption.device")
        except DeviceError as exc:
            raise EngineError(str(exc)) from None
        dtype = _dtype(self.config.dtype, device, torch)
        self.processor = AutoProcessor.from_pretrained(source, trust_remote_code=remote)
        self.processor.tokenizer.padding_side = "left"  # generation appends on the right
        self.model = (
            InternVLForConditionalGeneration.from_pretrained(
                source, dtype=dtype, trust_remote_code=remote
            )
            .to(device)  # type: ignore[arg-type]  # transformers' @wraps(Module.to) hides self
            .eval()
        )

    def generate(self, requests: list[Request]) -> list[Completion]:
        completions = []
        for (temperature, max_new_tokens), group in _by_sampling(requests):
            for start in range(0, len(group), self.config.batch_size):
                chunk = group[start : start + self.config.batch_size]
                try:
                    texts = self._generate_chunk(chunk, temperature, max_new_tokens)
                except Exception as exc:  # one failed batch must not lose the others
                    completions += _failed(chunk, exc)
                    continue
                completions += [Completion(r.key, t) for r, t in zip(chunk, texts)]
        return completions

    def _generate_chunk(self, chunk: list[Request], temperature: float, max_new_tokens: int):
        import torch

        texts = [self._model_text(r) for r in chunk]
        images = [im for r in chunk for im in r.images]
        inputs = self.processor(
            text=texts, images=images or None, padding=True, return_tensors="pt"
        ).to(self.model.device)
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
        sampling = (
            {"do_sample": True, "temperature": temperature}
            if temperature > 0
            else {"do_sample": False}
        )
        tokenizer = self.processor.tokenizer
        with torch.inference_mode():
            output = self.model.generate(
                **inputs,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                **sampling,
            )
        new_tokens = output[:, inputs["input_ids"].shape[1] :]
        return [t.strip() for t in tokenizer.batch_decode(new_tokens, skip_special_tokens=True)]

    def _model_text(self, request: Request) -> str:
        """The user turn in the checkpoint's chat template, or the bare prompt without one."""
        if not getattr(self.processor, "chat_template", None):
            return request.text.replace(IMAGE_SLOT, self.processor.image_token)
        content = []
        for i, piece in enumerate(request.text.split(IMAGE_SLOT)):
            if i:
                content.append({"type": "image"})
            if piece:
                content.append({"type": "text", "text": piece})
        messages = [{"role": "user", "content": content}]
        return self.processor.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )


def _dtype(name: str, device: str, torch):
    if name == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise EngineError(f"caption.dtype={name!r} is not a torch dtype (float32, bfloat16, ...)")
    return value


def _check_local_path(source: str) -> None:
    """A model written as a path (absolute, ./ or ~/: never a hub name) must exist."""
    if source.startswith(("/", "./", "../", "~")) and not Path(source).expanduser().exists():
        raise EngineError(f"{source}: no such local folder")


def _load_problem(source: str, exc: BaseException) -> str:
    if Path(source).exists():
        return f"{source}: not a loadable checkpoint folder ({exc})"
    return (
        f"{source}: no such local folder, and it could not be fetched as a hub model "
        f"(no network, or a wrong name): {exc}"
    )


# ---- lmdeploy ----------------------------------------------------------------------------


def import_lmdeploy() -> SimpleNamespace:
    """The parts of lmdeploy this engine calls; the one place that imports it."""
    try:
        import lmdeploy
        from lmdeploy.vl.constants import IMAGE_TOKEN
    except ImportError as exc:
        raise EngineError(
            f"caption.engine=lmdeploy needs the lmdeploy package ({exc}). It runs on NVIDIA GPUs "
            f"only and cannot be installed beside the CPU torch: on a GPU machine run "
            f"`pip install '{LMDEPLOY_REQUIREMENT}'` (the project's `gpu` extra), or use "
            f"caption.engine=transformers, or caption.engine=openai with a running api_server"
        ) from exc
    return SimpleNamespace(
        pipeline=lmdeploy.pipeline,
        TurbomindEngineConfig=lmdeploy.TurbomindEngineConfig,
        PytorchEngineConfig=lmdeploy.PytorchEngineConfig,
        GenerationConfig=lmdeploy.GenerationConfig,
        IMAGE_TOKEN=IMAGE_TOKEN,
    )


class LmdeployEngine(CaptionEngine):
    """lmdeploy batches internally (continuous batching): a whole round goes in one call."""

    def __init__(self, config, api: SimpleNamespace | None = None):
        self.config = config
        self.api = api  # None: import lmdeploy in load(); tests pass a stand-in here
        self.pipe: Callable[..., Any] | None = None  # an lmdeploy pipeline once loaded

    def load(self) -> None:
        if self.pipe is not None:
            return
        self.api = self.api or import_lmdeploy()
        backends = {
            "turbomind": self.api.TurbomindEngineConfig,
            "pytorch": self.api.PytorchEngineConfig,
        }
        if self.config.lmdeploy_backend not in backends:
            raise EngineError(
                f"caption.lmdeploy_backend={self.config.lmdeploy_backend!r}: "
                f"choose turbomind or pytorch"
            )
        backend = backends[self.config.lmdeploy_backend](
            tp=self.config.tensor_parallel, session_len=self.config.session_len
        )
        self.pipe = self.api.pipeline(self.config.model, backend_config=backend)

    def generate(self, requests: list[Request]) -> list[Completion]:
        api, pipe = self.api, self.pipe
        assert api is not None and pipe is not None, "load() ran before generate()"
        completions = []
        for (temperature, max_new_tokens), group in _by_sampling(requests):
            prompts = [(r.text.replace(IMAGE_SLOT, api.IMAGE_TOKEN), list(r.images)) for r in group]
            gen_config = api.GenerationConfig(
                max_new_tokens=max_new_tokens,
                do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else 1.0,
                top_p=0.9 if temperature > 0 else 1.0,
            )
            try:
                responses = pipe(prompts, gen_config=gen_config)
            except Exception as exc:
                completions += _failed(group, exc)
                continue
            if len(responses) != len(group):  # answers could no longer be bound to requests
                completions += _failed(
                    group,
                    EngineError(
                        f"lmdeploy returned {len(responses)} responses for {len(group)} prompts"
                    ),
                )
                continue
            completions += [
                Completion(r.key, _response_text(resp)) for r, resp in zip(group, responses)
            ]
        return completions


def _response_text(response) -> str | None:
    text = getattr(response, "text", response)
    return text if isinstance(text, str) else None


# ---- OpenAI-compatible HTTP --------------------------------------------------------------


class OpenAIEngine(CaptionEngine):
    def __init__(self, config):
        self.config = config
        self.client = None

    def load(self) -> None:
        if self.client is not None:
            return
        from openai import OpenAI

        if not self.config.endpoint:
            raise EngineError(
                "caption.engine=openai needs caption.endpoint, e.g. "
                "http://gpu-host:23333/v1 (an lmdeploy api_server or vLLM)"
            )
        self.client = OpenAI(
            base_url=self.config.endpoint,
            api_key=os.environ.get(self.config.api_key_env) or "none",
            timeout=self.config.request_timeout,
            max_retries=2,
        )
        self._check_model_served()

    def _check_model_served(self) -> None:
        try:
            served = [m.id for m in self.client.models.list()]
        except Exception as exc:
            raise EngineError(f"{self.config.endpoint}: endpoint not reachable ({exc})") from exc
        if self.config.model not in served:
            raise EngineError(
                f"{self.config.endpoint}: model {self.config.model!r} is not served "
                f"there (served: {served})"
            )

    def generate(self, requests: list[Request]) -> list[Completion]:
        completions = []
        with ThreadPoolExecutor(max_workers=self.config.concurrency) as pool:
            futures = {pool.submit(self._ask, r): r for r in requests}
            for future in as_completed(futures):  # finishing order, not request order
                request = futures[future]
                try:
                    completions.append(Completion(request.key, future.result()))
                except Exception as exc:
                    completions += _failed([request], exc)
        return completions

    def _ask(self, request: Request) -> str | None:
        response = self.client.chat.completions.create(
            model=self.config.model,
            messages=chat_messages(request),
            max_tokens=request.max_new_tokens,
            temperature=request.temperature,
        )
        return response.choices[0].message.content


def chat_messages(request: Request) -> list[dict]:
    """One user turn: the prompt's text pieces with each image as a data URL in its slot."""
    content: list[dict[str, object]] = []
    pieces = request.text.split(IMAGE_SLOT)
    for i, piece in enumerate(pieces):
        if piece:
            content.append({"type": "text", "text": piece})
        if i < len(request.images):
            content.append(
                {"type": "image_url", "image_url": {"url": image_data_url(request.images[i])}}
            )
    return [{"role": "user", "content": content}]


def image_data_url(image: Image.Image, quality: int = 90) -> str:
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", quality=quality)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()
