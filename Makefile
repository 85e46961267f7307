# make demo    : verify the bundled example loop and show the bug simloop catches
# make readme  : regenerate the README's sample outputs from real runs (bench/readme_samples.py)
# make test    : the whole test suite (never installs system packages: without chromium or redis-server, their tests skip)
# make check   : ruff and mypy --strict (the library, the plugin, examples/ and bench/), at the versions pinned in the dev extra
# make browser : install Debian's chromium for the HTML report's browser test (root, apt-get); CI calls it
# make redis   : install Debian's redis-server for the shared-database test (root, apt-get); CI calls it
# Each creates .venv and installs simloop with its test and dev extras first.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo readme test check bench browser redis clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,dev,pydantic-ai,langgraph,mcp,openai,openai-agents,litellm]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m examples.demo

readme: $(STAMP)
	$(BIN)/python bench/readme_samples.py

# Debian's packages for the tests that need a real component: chromium for the HTML report's browser test
# (tests/test_report.py), redis-server for the shared example database (tests/test_workers.py).  Only these
# targets install them (as root, with apt-get), and only when asked: `make test` uses what is on PATH and
# otherwise skips those tests with their reason.
define apt_install
@command -v $(2) >/dev/null 2>&1 && echo "$(2): $$(command -v $(2))" || { \
  echo "make $@: installing Debian's $(1) with apt-get (changes the system)"; \
  [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && apt-get update -q >/dev/null && \
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(1) >/dev/null; } || \
  echo "no $(2): $(3) (run make $@ as root)"
endef

browser:
	$(call apt_install,chromium,chromium,the HTML report's browser test will be skipped)

redis:
	$(call apt_install,redis-server,redis-server,the shared Redis database test will be skipped)

check: $(STAMP)
	$(BIN)/ruff check simloop pytest_plugin examples tests bench
	$(BIN)/mypy simloop pytest_plugin examples bench

# pytest's own exit code: 5 (no test collected) fails too, so a broken collection never passes CI.
test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/clock.py

clean:
	rm -rf $(VENV) .hypothesis .simloop
