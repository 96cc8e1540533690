"""Hypothesis profiles for the fuzz suite.

`ci` (the default, what the test command runs) keeps the whole suite within a few seconds per
surface: a fixed number of examples, no per-example deadline (an example is a network round
trip through an emulator, whose time says nothing about the code under test) and derandomised,
so a run is reproducible. `long` is for hunting: thousands of examples per surface, random
seeds. Choose with `BOTWEAVE_FUZZ_PROFILE=long` (and `BOTWEAVE_FUZZ_REPORT=<file>` for the
figures: payloads tried, status codes, tracebacks logged).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SHARED = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    "print_blob": True,
}
settings.register_profile("ci", max_examples=250, derandomize=True, database=None, **_SHARED)
settings.register_profile("long", max_examples=5000, **_SHARED)
settings.load_profile(os.environ.get("BOTWEAVE_FUZZ_PROFILE", "ci"))
