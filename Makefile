# Quick start: `make demo` (a distributed run on 4 ranks) and `make test` (the whole suite).
# Both create or reuse .venv with hpcdist, the MPICH wheel and the test tools.
.PHONY: demo test bench soak lint clean

demo:
	@bash scripts/demo.sh

test:
	@bash scripts/test.sh

bench:
	@bash scripts/bench.sh

soak:
	@bash scripts/soak.sh

lint:
	@.venv/bin/ruff check . && .venv/bin/ruff format --check .

clean:
	rm -rf .venv build *.egg-info .pytest_cache .ruff_cache
