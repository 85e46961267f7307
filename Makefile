# make demo : verify the bundled example loop and show the bug simloop catches
# make test : the whole test suite
# Both create .venv and install simloop with its test extras first.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench browser clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,pydantic-ai,langgraph]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m examples.demo

# Debian's chromium for the HTML report's browser test (tests/test_report.py); without it that test is
# skipped with its reason, not failed.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; } || \
	  echo "no chromium: the HTML report's browser test will be skipped (apt-get install chromium)"

test: $(STAMP) browser
	$(BIN)/python -m pytest; rc=$$?; [ $$rc -eq 5 ] && echo 'no tests collected' && rc=0; exit $$rc

bench: $(STAMP)
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/clock.py

clean:
	rm -rf $(VENV) .hypothesis .simloop
