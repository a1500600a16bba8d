.PHONY: install demo test lint readme

install:
	bash scripts/install.sh

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

lint:
	.venv/bin/ruff check comprl_gym tests benchmarks && .venv/bin/ruff format --check comprl_gym tests benchmarks

readme:
	.venv/bin/python scripts/update_readme.py
