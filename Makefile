# make demo        : verify the bundled example loop and show the bug simloop catches
# make test        : the whole test suite, in parallel, on the locked versions (constraints.txt)
# make test-latest : the suite on the newest releases the dependency ranges admit (.venv-latest)
# make test-floor  : the suite on the oldest release of each range (.venv-floor)
# make test-pythons: the locked suite on every Python simloop claims (3.11, 3.12, 3.13), side by side
# make lock        : constraints.txt regenerated from the newest allowed releases (after make test-latest passes)
# make readme      : regenerate the README's sample outputs from real runs (bench/readme_samples.py)
# make check       : ruff and mypy --strict (the library, the plugin, examples/ and bench/), at the versions pinned in the dev extra
# make browser     : install Debian's chromium for the HTML report's browser test (root, apt-get); CI calls it
# make redis       : install Debian's redis-server for the shared-database test (root, apt-get); CI calls it
# Each creates its virtual environment and installs simloop with its test and dev extras first.  None installs
# system packages except `make browser` and `make redis`.

PYTHON  ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
EXTRAS  := test,dev,pydantic-ai,langgraph,mcp,openai,openai-agents,litellm
PIP      = $(1)/bin/python -m pip install --quiet --disable-pip-version-check
# One pytest worker per core (pytest-xdist); PYTEST_ARGS adds options (PYTEST_ARGS="-k clock -x").
PYTEST  := -m pytest -n auto $(PYTEST_ARGS)
# The Pythons `make test-pythons` runs: each a name on PATH, or a version pyenv has installed (.ci/pythons says).
PYTHONS ?= 3.11 3.12 3.13

.PHONY: demo readme test test-latest test-floor test-pythons lock check bench browser redis clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(call PIP,$(VENV)) --upgrade pip
	$(call PIP,$(VENV)) -c constraints.txt -e ".[$(EXTRAS)]"
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
	$(BIN)/python $(PYTEST)

# The same suite on other releases than the lock's: the newest the ranges admit, and the oldest (each direct
# dependency at the lowest release its range and the others' allow: uv's lowest-direct resolution).  Each
# prints what it installed that differs from the lock first.  The README's samples are made with the locked
# versions: their test skips itself, with its reason, on any other.
test-latest:
	$(PYTHON) -m venv .venv-latest
	$(call PIP,.venv-latest) --upgrade pip
	$(call PIP,.venv-latest) --upgrade --upgrade-strategy eager -e ".[$(EXTRAS)]"
	.venv-latest/bin/python .ci/lockdiff.py constraints.txt
	.venv-latest/bin/python $(PYTEST)

test-floor:
	$(PYTHON) -m venv .venv-floor
	$(call PIP,.venv-floor) --upgrade pip "uv>=0.9"
	.venv-floor/bin/uv pip install --quiet --python .venv-floor/bin/python --resolution lowest-direct -e ".[$(EXTRAS)]"
	.venv-floor/bin/python .ci/lockdiff.py constraints.txt
	.venv-floor/bin/python $(PYTEST)

# The locked suite on each Python at once (one worker each; logs in .venv-pyX.Y/pytest.log, printed at the end).
test-pythons:
	PYTHONS="$(PYTHONS)" .ci/pythons

lock: test-latest
	{ sed -n '/^#/p' constraints.txt; .venv-latest/bin/python -m pip freeze --all --exclude-editable | grep -v '^pip=='; } \
	  > constraints.txt.new && mv constraints.txt.new constraints.txt

bench: $(STAMP)
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/clock.py

clean:
	rm -rf $(VENV) .venv-latest .venv-floor .venv-py3.* .hypothesis .simloop
