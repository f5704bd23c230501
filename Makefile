# Every target creates .venv and installs the pinned environment the first time (about 3-5
# minutes, 3 GB), then reuses it. Nothing else needs installing by hand: PyAV bundles FFmpeg.

PYTHON_SYSTEM ?= python3
VENV          ?= .venv
PY            := $(VENV)/bin/python
STAMP         := $(VENV)/.installed
TORCH         ?= torch==2.13.0
PIP           := $(PY) -m pip install --quiet --disable-pip-version-check

FILM  ?=
IP    ?=
OUT   ?= data
MODEL ?=
ARGS  ?=
FORMAT ?= webdataset
EXPORT ?= $(OUT)-export

# $(call q,VALUE): VALUE as one shell word, so that a path survives spaces, quotes and
# parentheses (film files are named "Kiki's Delivery Service (1989).mp4"). Every variable that
# holds a path or a name goes through it; ARGS alone is split into words by the shell, on purpose.
q = '$(subst ','\'',$(1))'

PORT  ?= 8765

.PHONY: help venv lint dataset caption report review test test-fast stress bench bench-gpu bench-scale motion-calibrate motion-eval quality-calibrate train play export eval clean

help:
	@echo "make dataset [FILM=path] [IP=name] [OUT=data] [MODEL=internvl-path]  films -> clip shards"
	@echo "make caption FILM=<film file or folder> MODEL=<internvl-path> [IP=name] caption existing shards"
	@echo "make report FILM=<film file, film or dataset folder> [REPORT=file.html] HTML report"
	@echo "make review [OUT=<film or dataset folder>] [PORT=8765]               review page on 127.0.0.1"
	@echo "make motion-calibrate SHARDS=<dataset folder>                          recalibrate motion levels"
	@echo "make motion-eval CLIPS=<folder of mp4> LEVELS=<levels file>            ACC-F / MAE-F"
	@echo "make quality-calibrate SHARDS=<dataset folder> ARGS='--set reject.X=Y'  re-decide usable clips"
	@echo "make train PHASE=encoder|mllm|adapt SHARDS=<folder> [CONFIG=yaml]      train AnimeGamer"
	@echo "make export SHARDS=<folder> FORMAT=webdataset|cogvideox EXPORT=<out>   other trainers' layouts"
	@echo "make eval GENERATED=<mp4 folder> REFERENCES=<character pictures or clips> [TEXTS=..] [LEVELS=..]  CLIP-I/T, DreamSim, ACC-F"
	@echo "make lint | make test | make test-fast (no slow tests) | make bench | make bench-gpu (CUDA)"
	@echo "make stress [ARGS='--runs 200 --jobs 2']   the CLI run many times: counts unclean exits"

venv: $(STAMP)

# pip compiles each package's modules one file at a time (85 CPU-s for this environment);
# compileall does the same on every core. Like pip, it skips what does not compile (test data
# shipped in some packages): its exit status says only that such files exist.
$(STAMP): requirements.lock constraints.txt pyproject.toml
	test -x $(PY) || $(PYTHON_SYSTEM) -m venv $(VENV)
	$(PIP) --no-compile $(TORCH)
	$(PIP) --no-compile -c constraints.txt -r requirements.lock
	$(PIP) --no-deps --no-build-isolation -e .
	$(PY) -m compileall -qq -j 0 $(VENV)/lib || true
	touch $(STAMP)

dataset: venv
	$(PY) -m pipeline.cli dataset $(if $(FILM),$(call q,$(FILM))) $(if $(IP),--ip $(call q,$(IP))) --out $(call q,$(OUT)) $(if $(MODEL),--model $(call q,$(MODEL))) $(ARGS)

caption: venv
	$(PY) -m pipeline.cli caption $(call q,$(or $(FILM),$(OUT))) --dataset-dir $(call q,$(OUT)) $(if $(MODEL),--model $(call q,$(MODEL))) $(if $(IP),--ip $(call q,$(IP))) $(ARGS)

report: venv
	$(PY) -m pipeline.cli report $(call q,$(or $(FILM),$(OUT))) --dataset-dir $(call q,$(OUT)) $(if $(REPORT),--out $(call q,$(REPORT))) $(ARGS)

review: venv
	$(PY) -m pipeline.cli review $(call q,$(or $(FILM),$(OUT))) --port $(call q,$(PORT)) $(ARGS)

motion-calibrate: venv
	$(PY) -m pipeline.cli motion-calibrate $(call q,$(or $(SHARDS),$(OUT))) $(ARGS)

quality-calibrate: venv
	$(PY) -m pipeline.cli quality-calibrate $(call q,$(or $(SHARDS),$(OUT))) $(ARGS)

motion-eval: venv
	$(PY) -m pipeline.cli motion-eval $(call q,$(CLIPS)) --levels $(call q,$(LEVELS)) $(ARGS)

train: venv
	$(PY) -m pipeline.cli train --phase $(call q,$(PHASE)) --shards $(call q,$(or $(SHARDS),$(OUT))) $(if $(CONFIG),--config $(call q,$(CONFIG))) $(ARGS)

play: venv
	$(PY) -m pipeline.cli play $(ARGS)

export: venv
	$(PY) -m pipeline.cli export $(call q,$(or $(SHARDS),$(OUT))) --format $(call q,$(FORMAT)) --out $(call q,$(EXPORT)) $(ARGS)

eval: venv
	$(PY) -m pipeline.cli eval $(call q,$(GENERATED)) $(if $(REFERENCES),--references $(call q,$(REFERENCES))) $(if $(TEXTS),--texts $(call q,$(TEXTS))) $(if $(LEVELS),--levels $(call q,$(LEVELS))) $(ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: venv
	@scripts/install-chromium.sh || echo "warning: Chromium could not be installed; the browser tests of the report and the review page will fail (ANIMEGAMER_SKIP_BROWSER=1 skips them)"
	@scripts/install-fonts.sh || echo "warning: the fonts could not be installed; the tests of the labelled overlay films will fail (scripts/install-fonts.sh)"
	PYTHON=$(PY) scripts/test.sh "" $(ARGS)

test-fast: venv
	@scripts/install-fonts.sh || echo "warning: the fonts could not be installed; the tests of the labelled overlay films will fail (scripts/install-fonts.sh)"
	PYTHON=$(PY) scripts/test.sh "not slow" $(ARGS)

# The CLI run many times, two at a time, counting the runs that do not exit as they should (an
# abort at interpreter exit shows up once in a few hundred runs: issue 30). Minutes, so not a test.
stress: venv
	nice -n 10 $(PY) -m bench.stress_exit $(ARGS)

bench: venv
	$(PY) -m bench.run $(ARGS)

# The folder-level passes at 10k and 100k clips (ARGS="--clips 1000000" for a million; docs/quality.md),
# then the semantic duplicate pass at 100k and 1M clips (docs/scores.md; 3 GB of /tmp at 1M).
bench-scale: venv
	$(PY) -m bench.bench_scale $(ARGS)
	$(PY) -m bench.similar_scale $(ARGS)

# Every GPU path at real size with random weights (docs/gpu.md); says so and exits 0 without CUDA.
# On a GPU machine whose own Python holds CUDA PyTorch: `python3 -m bench.gpu` (docs/gpu.md).
bench-gpu: venv
	$(PY) -m bench.gpu $(ARGS)

clean:
	rm -rf $(VENV) data bench/out test-artifacts .pytest_cache
