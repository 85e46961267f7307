# make demo    : verify the bundled example loop and show the bug simloop catches
# make test    : the whole test suite (never installs system packages: without chromium the browser test skips)
# make check   : ruff and mypy --strict, at the versions pinned in the dev extra
# make browser : install Debian's chromium for the HTML report's browser test (root, apt-get); CI calls it
# Each creates .venv and installs simloop with its test and dev extras first.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test check bench browser clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,dev,pydantic-ai,langgraph,mcp]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m examples.demo

# Debian's chromium for the HTML report's browser test (tests/test_report.py). Only this target installs it
# (as root, with apt-get), and only when asked: `make test` uses a chromium already on PATH and otherwise skips
# that one test with its reason.
browser:
	@command -v chromium >/dev/null 2>&1 && echo "chromium: $$(command -v chromium)" || { \
	  echo "make browser: installing Debian's chromium with apt-get (changes the system)"; \
	  [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && apt-get update -q >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; } || \
	  echo "no chromium: the HTML report's browser test will be skipped (run make browser as root)"

check: $(STAMP)
	$(BIN)/ruff check simloop pytest_plugin examples tests bench
	$(BIN)/mypy simloop pytest_plugin

test: $(STAMP)
	$(BIN)/python -m pytest; rc=$$?; [ $$rc -eq 5 ] && echo 'no tests collected' && rc=0; exit $$rc

bench: $(STAMP)
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/clock.py

clean:
	rm -rf $(VENV) .hypothesis .simloop
