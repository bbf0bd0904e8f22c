# `make test` installs what the tests need (apt, a pinned venv, the test-bed image) and runs every
# stage, timed. `make demo` shows the test bed: the SGLang double launched by hand, as operators do.
SHELL := /bin/bash

.PHONY: build release test demo setup unit lint sanity molecule clean bench-readiness bench-count bench-cutover bench-prewarm bench-fleet bench-restart readmes surveys gpu-bundle

# The collection's tarball, inferops-sglang-VERSION.tar.gz, in DIST (here unless given): what `ansible-galaxy
# collection install` takes. It needs ansible-core only: the ansible-galaxy on PATH, else one in a venv with
# ansible-core alone (BUILD_VENV, made once with the python3 on PATH).
DIST ?= .
BUILD_VENV ?= .cache/build-venv
build:
	@galaxy=$$(command -v ansible-galaxy) || { galaxy=$(BUILD_VENV)/bin/ansible-galaxy; [ -x "$$galaxy" ] || \
	  { echo "no ansible-galaxy on PATH: a venv with ansible-core in $(BUILD_VENV)" >&2; \
	    python3 -m venv $(BUILD_VENV) && $(BUILD_VENV)/bin/python -m pip install -q 'ansible-core>=2.16' >&2; } || exit 1; }; \
	"$$galaxy" collection build --force --output-path "$(DIST)"

# make release VERSION=X.Y.Z [DATE=YYYY-MM-DD]: the changelog's fragments released as X.Y.Z (antsibull-changelog),
# CHANGELOG.rst regenerated, galaxy.yml and every tarball or image name set to X.Y.Z (tests/tools/release.py).
release:
	bash tests/setup.sh >/dev/null && .venv/bin/python tests/tools/release.py "$(VERSION)" $(if $(DATE),--date "$(DATE)")

test:
	bash tests/run.sh

demo:
	bash tests/testbed/demo.sh

setup unit lint sanity:
	bash tests/run.sh $@

# make molecule S=testbed   (one scenario; all when S is empty)
molecule:
	bash tests/run.sh molecule$(if $(S),:$(S))

clean:
	rm -rf .venv .cache tests/output

# Benchmarks (not tests): each prints a table.
bench-readiness bench-count:
	bash tests/run.sh setup >/dev/null && source tests/testbed/env.sh && \
	  python benchmarks/$(subst bench-count,process_count_scale,$(subst bench-readiness,readiness_lag,$@)).py

# The cutover's downtime and wall time against a stock hand cutover (RUNS=3 LOAD=10); docs/benchmarks/.
bench-cutover:
	bash tests/run.sh setup >/dev/null && source tests/testbed/env.sh && \
	  python -m pip install --quiet -r benchmarks/requirements.txt && python benchmarks/cutover_downtime.py

# The new server's load with the model out of the page cache, cutover_prewarm off vs auto (RUNS=3 SIZE_GB=2).
bench-prewarm:
	bash tests/run.sh setup >/dev/null && source tests/testbed/env.sh && \
	  python -m pip install --quiet -r benchmarks/requirements.txt && python benchmarks/prewarm.py

bench-fleet:
	bash tests/run.sh setup >/dev/null && source tests/testbed/env.sh && python benchmarks/fleet.py

# Restarts with the weights kept (SGLang 0.5.17's weight cache daemon), from the GPU suite's results:
# `run.sh weights` on the GPU machine writes weights.json; copied to tests/gpu/real/results/DATE/ (a continuation call's
# as weights-2.json), this writes docs/benchmarks/restart.md from the last folder that holds such files (RESULTS=DIR
# for another run; partial-*.json, a call that measured part of the suite, stay out).
bench-restart:
	python3 tests/gpu/real/weights.py summary --md docs/benchmarks/restart.md \
	  $$(ls $(or $(RESULTS),$$(dirname $$(ls tests/gpu/real/results/*/weights*.json | tail -1)))/weights*.json)

# Role READMEs are generated from meta/argument_specs.yml (a unit test checks them).
readmes:
	bash tests/run.sh setup >/dev/null && source tests/testbed/env.sh && python tests/tools/role_readme.py

# AWX job templates' surveys are generated from the cutover role's meta/argument_specs.yml (a unit test checks them).
surveys:
	bash tests/run.sh setup >/dev/null && source tests/testbed/env.sh && python awx/generate_surveys.py

# What a device call carries to run the real SGLang 0.5.15 on an H200 (tests/gpu/real/README.md), cached in .cache/gpu-real/.
gpu-bundle:
	python3 tests/gpu/real/bundle.py $(PARTS)
