# make demo : verify the bundled example loop and show the bug simloop catches
# make test : the whole test suite
# Both create .venv and install simloop with its test extras first.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m examples.demo

test: $(STAMP)
	$(BIN)/python -m pytest; rc=$$?; [ $$rc -eq 5 ] && echo 'no tests collected' && rc=0; exit $$rc

bench: $(STAMP)
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/clock.py

clean:
	rm -rf $(VENV) .hypothesis .simloop
