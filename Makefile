# `make test` installs what the tests need (apt, a pinned venv, the test-bed image) and runs every
# stage, timed. `make demo` shows the test bed: the SGLang double launched by hand, as operators do.
SHELL := /bin/bash

.PHONY: build test demo setup unit lint sanity molecule clean bench-readiness bench-count bench-cutover bench-prewarm bench-fleet readmes surveys

# The collection's tarball, inferops-sglang-VERSION.tar.gz, here (what `ansible-galaxy collection install` takes).
build:
	bash tests/run.sh setup >/dev/null && source tests/testbed/env.sh && ansible-galaxy collection build --force

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

# The cutover's downtime and wall time against the seeds' procedure (RUNS=3 LOAD=10); docs/benchmarks/.
bench-cutover:
	bash tests/run.sh setup >/dev/null && source tests/testbed/env.sh && \
	  python -m pip install --quiet -r benchmarks/requirements.txt && python benchmarks/cutover_downtime.py

# The new server's load with the model out of the page cache, cutover_prewarm off vs auto (RUNS=3 SIZE_GB=2).
bench-prewarm:
	bash tests/run.sh setup >/dev/null && source tests/testbed/env.sh && \
	  python -m pip install --quiet -r benchmarks/requirements.txt && python benchmarks/prewarm.py

bench-fleet:
	bash tests/run.sh setup >/dev/null && source tests/testbed/env.sh && python benchmarks/fleet.py

# Role READMEs are generated from meta/argument_specs.yml (a unit test checks them).
readmes:
	bash tests/run.sh setup >/dev/null && source tests/testbed/env.sh && python tests/tools/role_readme.py

# AWX job templates' surveys are generated from the cutover role's meta/argument_specs.yml (a unit test checks them).
surveys:
	bash tests/run.sh setup >/dev/null && source tests/testbed/env.sh && python awx/generate_surveys.py
