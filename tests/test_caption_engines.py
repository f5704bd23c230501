"""The three engines: transformers with a tiny random-weight InternVL built here, an
OpenAI-compatible server run in-process on 127.0.0.1, and lmdeploy up to its import boundary."""

from __future__ import annotations

import http.server
import json
import os
import random
import threading
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
from captioning import ADVERB_BY_LEVEL, answer_well, image_word, make_clips, read_raw
from conftest import ROOT, SINTEL_REFERENCES
from PIL import Image

from core.shards import read_clips
from pipeline.cli import main as cli_main
from pipeline.passes.caption_films import caption_film
from stages.captioning.engines import (
    EngineError,
    LmdeployEngine,
    OpenAIEngine,
    Request,
    TransformersEngine,
    chat_messages,
    image_data_url,
    import_lmdeploy,
    make_engine,
)
from stages.captioning.images import clip_frame_grid
from stages.captioning.stage import CaptionConfig, CaptionStage


def tiny_config(path, **changes) -> CaptionConfig:
    base = CaptionConfig(
        model=str(path),
        engine="transformers",
        device="cpu",
        num_frames=4,
        frame_height=56,
        max_new_tokens=6,
        max_retries=1,
        batch_size=4,
    )
    return replace(base, **changes)


@pytest.mark.slow
def test_transformers_engine_batches_without_mixing_answers(tiny_internvl, clip_videos):
    """Greedy answers in one left-padded batch equal the answers asked one by one."""
    engine = TransformersEngine(tiny_config(tiny_internvl))
    engine.load()
    grids = [Image.frombytes("RGB", (60, 40), bytes([i * 40]) * (60 * 40 * 3)) for i in range(3)]
    requests = [
        Request(f"r{i}", "Image-1: <image>" + "describe " * i, (grid,), max_new_tokens=6)
        for i, grid in enumerate(grids)
    ]
    together = {c.key: c.text for c in engine.generate(requests)}
    alone = {r.key: engine.generate([r])[0].text for r in requests}
    assert together == alone
    assert len(set(together.values())) > 1  # different inputs, different (random) answers
    assert all(isinstance(t, str) for t in together.values())


def test_transformers_engine_refuses_what_it_cannot_load(tmp_path):
    missing = TransformersEngine(tiny_config(tmp_path / "nowhere"))
    with pytest.raises(EngineError, match="nowhere: no such local folder"):
        missing.load()
    with pytest.raises(EngineError, match="caption.engine='vllm'"):
        make_engine(CaptionConfig(model="x", engine="vllm"))


@pytest.mark.slow
def test_stage_end_to_end_on_the_tiny_checkpoint(tiny_internvl, film):
    """Random weights answer nonsense: every clip goes through both prompts and its retries,
    ends caption_failed with the model's raw text kept, and is counted."""
    summary = caption_film(film, tiny_config(tiny_internvl), SINTEL_REFERENCES)
    clips = list(read_clips(film / "shards"))
    assert summary.by_status == {"caption_failed": 5}
    assert summary.requests == 5 * 2 * 2  # clips x prompts x (1 + max_retries)
    assert summary.retried_requests == 10
    for clip in clips:
        raw = read_raw(clip)
        assert isinstance(raw["state"], str) and isinstance(raw["characters"], str)
        assert raw["attempts"] == {"characters": 2, "state": 2}
        assert clip.subject is None and clip.caption_model == str(tiny_internvl)
    assert json.loads((film / "summary.json").read_text())["captions"] == "incomplete"


# ---- an OpenAI-compatible server on 127.0.0.1 ----------------------------------------------


class ScriptedServer:
    """Answers /v1/chat/completions from the pictures it is sent, after a random delay so that
    requests finish out of order; refuses more than `max_requests`. Loopback only."""

    def __init__(self, answer, max_requests=200, model="tiny-internvl"):
        self.answer, self.max_requests, self.model = answer, max_requests, model
        self.bodies, self.lock, self.rng = [], threading.Lock(), random.Random(0)
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path.endswith("/models"):
                    self._send(
                        200, {"object": "list", "data": [{"id": server.model, "object": "model"}]}
                    )
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.bodies.append(body)
                    count, delay = len(server.bodies), server.rng.uniform(0, 0.03)
                if count > server.max_requests:
                    self._send(429, {"error": "request budget of the test server spent"})
                    return
                time.sleep(delay)
                status, text = server.answer(body, count)
                self._send(
                    status,
                    {
                        "id": str(count),
                        "object": "chat.completion",
                        "created": 0,
                        "model": server.model,
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": text},
                            }
                        ],
                    },
                )

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _as_request(body) -> SimpleNamespace:
    """The prompt text and pictures a chat body carries, as the scripted answers expect them."""
    import base64
    import io

    text, images = "", []
    for part in body["messages"][0]["content"]:
        if part["type"] == "text":
            text += part["text"]
        else:
            text += "<image>"
            data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
            images.append(Image.open(io.BytesIO(data)).convert("RGB"))
    return SimpleNamespace(text=text, images=images, temperature=body.get("temperature"))


def http_config(url, **changes) -> CaptionConfig:
    base = CaptionConfig(
        model="tiny-internvl",
        engine="openai",
        endpoint=url,
        num_frames=8,
        frame_height=96,
        max_retries=2,
        concurrency=4,
        request_timeout=20,
    )
    return replace(base, **changes)


@pytest.mark.slow
def test_http_engine_binds_out_of_order_answers_to_their_clips(clip_videos):
    def answer(body, count):
        return 200, answer_well(_as_request(body), 0)

    clips = make_clips(clip_videos)
    with ScriptedServer(answer) as server:
        stage = CaptionStage(http_config(server.url), SINTEL_REFERENCES)
        done = stage.process_batch(clips)
    assert len(server.bodies) == 10
    for clip in done:
        assert clip.caption_status == "ok" and clip.characters == ["Sintel"]
        assert clip.adverb == ADVERB_BY_LEVEL[clip.motion_level]
    # the server named each picture it got; each clip carries the name of its own frame grid
    for clip in done:
        sent = _as_request(
            {
                "messages": [
                    {
                        "content": [
                            {
                                "type": "image_url",
                                "image_url": {
                                    "url": image_data_url(clip_frame_grid(clip.video, 8, 96, 4))
                                },
                            }
                        ]
                    }
                ]
            }
        ).images[0]
        assert clip.subject == image_word(sent)
    assert len({clip.subject for clip in done}) == 5
    body = server.bodies[0]
    assert body["model"] == "tiny-internvl" and body["temperature"] == 0.0
    assert [p["type"] for p in body["messages"][0]["content"]][:2] in (["text", "image_url"],)


@pytest.mark.slow
def test_http_engine_retries_server_errors_and_bad_answers(clip_videos):
    def answer(body, count):
        request = _as_request(body)
        if "[Num]" in request.text:
            return 200, "[Number]1[Index]2"
        if request.temperature == 0.0:
            return 200, "<S>a girl</S>"  # invalid on the first, greedy attempt
        return 200, answer_well(request, 1)

    with ScriptedServer(answer) as server:
        stage = CaptionStage(http_config(server.url), SINTEL_REFERENCES)
        [clip] = stage.process_batch(make_clips(clip_videos)[:1])
    assert clip.caption_status == "ok" and clip.characters == ["Scales"]
    assert [b["temperature"] for b in server.bodies].count(0.7) == 1
    assert read_raw(clip)["problems"]["state"] == [
        "missing tags ['MD', 'EV', 'MA', 'SC', 'ET', 'ST']"
    ]


@pytest.mark.slow
def test_http_engine_names_an_unserved_model_and_a_dead_endpoint():
    with ScriptedServer(lambda body, count: (200, "")) as server:
        engine = OpenAIEngine(http_config(server.url, model="InternVL-26B"))
        with pytest.raises(EngineError, match="'InternVL-26B' is not served there.*tiny-internvl"):
            engine.load()
        dead_url = server.url
    engine = OpenAIEngine(http_config(dead_url, request_timeout=2))
    engine_config = engine.config
    assert engine_config.endpoint.startswith("http://127.0.0.1:")
    with pytest.raises(EngineError, match="endpoint not reachable"):
        engine.load()


def test_chat_messages_put_each_picture_in_its_slot():
    red, blue = Image.new("RGB", (8, 8), (255, 0, 0)), Image.new("RGB", (8, 8), (0, 0, 255))
    [message] = chat_messages(Request("k", "Image-1: <image>Image-2: <image>Which?", (red, blue)))
    kinds = [p["type"] for p in message["content"]]
    assert kinds == ["text", "image_url", "text", "image_url", "text"]
    assert (
        message["content"][0]["text"] == "Image-1: " and message["content"][4]["text"] == "Which?"
    )


@pytest.mark.slow
def test_cli_captions_a_film_over_http_with_an_ip_manifest(film, tmp_path, capsys):
    manifest = tmp_path / "sintel.yaml"
    manifest.write_text(
        "name: sintel\nprotagonists:\n"
        f"  - name: Sintel\n    images: [{ROOT}/manifests/sintel/sintel_1.png]\n"
        f"  - name: Scales\n    images: [{ROOT}/manifests/sintel/scales_1.png]\n"
    )
    with ScriptedServer(lambda body, count: (200, answer_well(_as_request(body), 0))) as server:
        code = cli_main(
            [
                "caption",
                str(film),
                "--engine",
                "openai",
                "--endpoint",
                server.url,
                "--model",
                "tiny-internvl",
                "--ip",
                str(manifest),
                "--set",
                "caption.num_frames=4",
            ]
        )
    assert code == 0
    assert '{"ok": 5}' in capsys.readouterr().out
    clips = list(read_clips(film / "shards"))
    assert {c.caption_status for c in clips} == {"ok"}
    texts = [p.get("text", "") for b in server.bodies for p in b["messages"][0]["content"]]
    assert any("(4 frames from a anime video)" in t for t in texts)  # --set reached the prompt


@pytest.mark.slow
def test_cli_without_a_model_marks_pending_and_says_how(film, capsys):
    assert cli_main(["caption", str(film.parent), "--ip", "generic"]) == 0
    out = capsys.readouterr().out
    assert "animegamer caption" in out and '{"pending": 5}' in out


# ---- lmdeploy, up to its boundary ----------------------------------------------------------


class FakeLmdeploy:
    """Stands in for the lmdeploy module only (it cannot be installed here): records what the
    engine builds and answers each prompt through `answer`, in order, as lmdeploy does."""

    IMAGE_TOKEN = "<IMAGE_TOKEN>"

    def __init__(self, answer):
        self.answer, self.calls, self.pipeline_args = answer, [], None
        self.TurbomindEngineConfig = lambda **kw: ("turbomind", kw)
        self.PytorchEngineConfig = lambda **kw: ("pytorch", kw)
        self.GenerationConfig = lambda **kw: SimpleNamespace(**kw)

    def pipeline(self, model, backend_config):
        self.pipeline_args = (model, backend_config)
        return self._pipe

    def _pipe(self, prompts, gen_config):
        self.calls.append((prompts, gen_config))
        return [
            SimpleNamespace(text=self.answer(text, images, gen_config)) for text, images in prompts
        ]


def lmdeploy_answer(text, images, gen_config):
    request = SimpleNamespace(text=text.replace(FakeLmdeploy.IMAGE_TOKEN, "<image>"), images=images)
    return answer_well(request, 0)


def test_lmdeploy_engine_builds_batched_prompts_and_generation_configs(clip_videos):
    fake = FakeLmdeploy(lmdeploy_answer)
    config = CaptionConfig(
        model="/models/InternVL2_5-26B",
        engine="lmdeploy",
        tensor_parallel=2,
        session_len=8192,
        num_frames=8,
        frame_height=96,
    )
    stage = CaptionStage(config, SINTEL_REFERENCES, engine=LmdeployEngine(config, api=fake))
    assert stage.resources.gpus == 2
    done = stage.process_batch(make_clips(clip_videos))
    assert fake.pipeline_args == (
        "/models/InternVL2_5-26B",
        ("turbomind", {"tp": 2, "session_len": 8192}),
    )
    [(prompts, gen_config)] = fake.calls  # one call for the whole round: lmdeploy batches
    assert len(prompts) == 10
    for text, images in prompts:
        assert "<image>" not in text and text.count(fake.IMAGE_TOKEN) == len(images)
    assert gen_config.do_sample is False and gen_config.max_new_tokens == config.max_new_tokens
    assert all(c.caption_status == "ok" for c in done)
    assert all(c.adverb == ADVERB_BY_LEVEL[c.motion_level] for c in done)


def test_lmdeploy_retries_sample_and_count_mismatches_fail_the_round(clip_videos):
    seen = []

    def answer(text, images, gen_config):
        seen.append(gen_config)
        return "nonsense" if not gen_config.do_sample else lmdeploy_answer(text, images, gen_config)

    fake = FakeLmdeploy(answer)
    config = CaptionConfig(model="m", engine="lmdeploy", lmdeploy_backend="pytorch", max_retries=1)
    engine = LmdeployEngine(config, api=fake)
    [clip] = CaptionStage(config, None, engine=engine).process_batch(make_clips(clip_videos)[:1])
    assert clip.caption_status == "ok"
    assert fake.pipeline_args[1][0] == "pytorch"
    assert [g.do_sample for g in seen] == [False, True] and seen[1].temperature == 0.7

    engine.pipe = lambda prompts, gen_config: []  # a pipeline that lost answers
    completions = engine.generate([Request("a", "x", ()), Request("b", "y", ())])
    assert all(c.error and "0 responses for 2 prompts" in c.error for c in completions)


def test_lmdeploy_missing_says_how_to_install():
    try:
        import lmdeploy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("lmdeploy is installed here")
    with pytest.raises(EngineError, match="pip install 'lmdeploy"):
        import_lmdeploy()
    stage = CaptionStage(CaptionConfig(model="m", engine="lmdeploy"))
    with pytest.raises(EngineError, match="GPUs only"):
        stage.setup()


@pytest.mark.gpu
def test_lmdeploy_real_checkpoint_on_a_gpu(clip_videos):
    """Runs where lmdeploy, a GPU and a checkpoint exist: ANIMEGAMER_INTERNVL=/path/to/InternVL."""
    model = os.environ.get("ANIMEGAMER_INTERNVL")
    if not model:
        pytest.skip("set ANIMEGAMER_INTERNVL to a local InternVL checkpoint to run this")
    pytest.importorskip("lmdeploy")
    config = CaptionConfig(model=model, engine="lmdeploy")
    stage = CaptionStage(config, SINTEL_REFERENCES)
    done = stage.process_batch(make_clips(clip_videos))
    assert all(c.caption_status in ("ok", "caption_failed") for c in done)
    assert sum(c.caption_status == "ok" for c in done) >= 3


# ---- Ray actors ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.serial  # Ray's processes on every core
def test_ray_actor_pool_captions_a_film_like_the_local_run(tiny_internvl, film, tmp_path):
    """An actor loading the tiny checkpoint; results land on the right clips, in order,
    identical to the in-process run, and the actors' request counts reach the summary."""
    ray = pytest.importorskip("ray")
    started_here = not ray.is_initialized()
    config = tiny_config(tiny_internvl, executor="ray", workers=1, max_retries=0, batch_size=2)
    try:
        summary = caption_film(film, config, SINTEL_REFERENCES)
    finally:
        if started_here:
            ray.shutdown()
    on_ray = {c.clip_id: c.caption_raw for c in read_clips(film / "shards")}
    assert summary.requests == 10 and summary.by_status == {"caption_failed": 5}

    local = tmp_path / "local"
    import shutil

    shutil.copytree(film, local)
    (local / "caption_cache.jsonl").unlink(missing_ok=True)
    caption_film(local, replace(config, executor="local"), SINTEL_REFERENCES)
    assert {c.clip_id: c.caption_raw for c in read_clips(local / "shards")} == on_ray


@pytest.mark.slow
def test_dataset_command_with_a_model_captions_the_films_it_cut(tiny_internvl, tmp_path, capsys):
    """`make dataset FILM=... MODEL=...`: cut, then caption through the configured engine."""
    from conftest import BIKES as bikes

    code = cli_main(
        [
            "dataset",
            str(bikes),
            "--out",
            str(tmp_path),
            "--executor",
            "local",
            "--quiet",
            "--ip",
            "sintel",
            "--model",
            str(tiny_internvl),
            "--set",
            "caption.device=cpu",
            "--set",
            "caption.num_frames=4",
            "--set",
            "caption.frame_height=56",
            "--set",
            "caption.max_new_tokens=6",
            "--set",
            "caption.max_retries=0",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "captions: caption_failed 3" in out  # random weights answer nonsense, counted
    film_dir = next(tmp_path.glob("bikes-*"))
    clips = list(read_clips(film_dir / "shards"))
    assert len(clips) == 3
    for clip in clips:
        assert clip.caption_model == str(tiny_internvl) and clip.caption_status == "caption_failed"
        assert read_raw(clip)["state"]  # the model's own text is kept
        assert clip.motion_level is not None  # the state prompt was given the clip's level
    summary = json.loads((film_dir / "summary.json").read_text())
    assert summary["captions"] == "incomplete" and summary["caption"]["protagonists"] == [
        "Sintel",
        "Scales",
    ]
