"""pytest-simloop: the pytest plugin for simloop (thin: all logic lives in `simloop`)."""
