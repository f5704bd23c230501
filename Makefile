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

.PHONY: help venv lint dataset caption report test bench motion-calibrate motion-eval train play export eval clean

help:
	@echo "make dataset [FILM=path] [IP=name] [OUT=data] [MODEL=internvl-path]  films -> clip shards"
	@echo "make caption FILM=<film folder> MODEL=<internvl-path> [IP=name]       caption existing shards"
	@echo "make report FILM=<film or dataset folder> [REPORT=file.html]         HTML report"
	@echo "make motion-calibrate SHARDS=<dataset folder>                          recalibrate motion levels"
	@echo "make motion-eval CLIPS=<folder of mp4> LEVELS=<levels file>            ACC-F / MAE-F"
	@echo "make train PHASE=encoder|mllm|adapt SHARDS=<folder> [CONFIG=yaml]      train AnimeGamer"
	@echo "make export SHARDS=<folder> FORMAT=webdataset|cogvideox EXPORT=<out>   other trainers' layouts"
	@echo "make eval GENERATED=<mp4 folder> REFERENCES=<mp4 folder> [TEXTS=..] [LEVELS=..]  CLIP-I/T, DreamSim, ACC-F"
	@echo "make lint | make test | make bench"

venv: $(STAMP)

$(STAMP): requirements.lock constraints.txt pyproject.toml
	test -x $(PY) || $(PYTHON_SYSTEM) -m venv $(VENV)
	$(PIP) $(TORCH)
	$(PIP) -c constraints.txt -r requirements.lock
	$(PIP) --no-deps --no-build-isolation -e .
	touch $(STAMP)

dataset: venv
	$(PY) -m pipeline.cli dataset $(FILM) $(if $(IP),--ip $(IP)) --out $(OUT) $(if $(MODEL),--model $(MODEL)) $(ARGS)

caption: venv
	$(PY) -m pipeline.cli caption $(FILM) $(if $(MODEL),--model $(MODEL)) $(if $(IP),--ip $(IP)) $(ARGS)

report: venv
	$(PY) -m pipeline.cli report $(or $(FILM),$(OUT)) $(if $(REPORT),--out $(REPORT)) $(ARGS)

motion-calibrate: venv
	$(PY) -m pipeline.cli motion-calibrate $(or $(SHARDS),$(OUT)) $(ARGS)

motion-eval: venv
	$(PY) -m pipeline.cli motion-eval $(CLIPS) --levels $(LEVELS) $(ARGS)

train: venv
	$(PY) -m pipeline.cli train --phase $(PHASE) --shards $(or $(SHARDS),$(OUT)) $(if $(CONFIG),--config $(CONFIG)) $(ARGS)

play: venv
	$(PY) -m pipeline.cli play $(ARGS)

export: venv
	$(PY) -m pipeline.cli export "$(or $(SHARDS),$(OUT))" --format $(FORMAT) --out "$(EXPORT)" $(ARGS)

eval: venv
	$(PY) -m pipeline.cli eval "$(GENERATED)" $(if $(REFERENCES),--references "$(REFERENCES)") $(if $(TEXTS),--texts "$(TEXTS)") $(if $(LEVELS),--levels "$(LEVELS)") $(ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: venv
	@scripts/install-chromium.sh || echo "warning: Chromium could not be installed; the report's browser test will fail (ANIMEGAMER_SKIP_BROWSER=1 skips it)"
	$(PY) -m pytest $(ARGS)

bench: venv
	$(PY) -m bench.run $(ARGS)

clean:
	rm -rf $(VENV) data bench/out test-artifacts .pytest_cache
