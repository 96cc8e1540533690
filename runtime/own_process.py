"""What botweave's own processes set for the whole interpreter, once they have started.

`botweave run` and `botweave chat` (runtime/cli.py) and a model process (model_host.py) are
processes botweave owns from start to end, so they may tune what is process-wide. `App.serve()`
never calls this: a program that embeds botweave keeps its interpreter as it set it.
"""

from __future__ import annotations

import gc
import sys

#: Allocations between two collections of the youngest generation. Python's default (700)
#: suits short scripts; a bot with a few hundred turns in flight holds tens of thousands of
#: young objects (each model call builds and drops hundreds), so at 700 every collection
#: walked the same live requests again: about a tenth of the CPU of a turn. Garbage without
#: cycles is freed at once either way; only cycles wait for the next collection.
GC_YOUNG_THRESHOLD = 50_000


def tune_own_process() -> None:
    """Move everything start-up built (litellm alone is hundreds of thousands of objects) out
    of the garbage collector's sight, and collect the young generation less often. Those
    objects live as long as the process, yet every full collection walked all of them: a
    pause of about a quarter of a second, a few times a minute under load, with every
    conversation waiting. litellm, if it was loaded, stops printing its help banner after
    every failed call (a terminal's chat would show it between the lines)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, max(older, 50), max(oldest, 100))
    litellm = sys.modules.get("litellm")
    if litellm is not None:
        setattr(litellm, "suppress_debug_info", True)
