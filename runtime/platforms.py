"""The platforms installed in this environment, found through the `botweave.platforms` entry
points, so adding one is installing a package, not editing the runtime."""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points

from botweave.adapter import PlatformSpec

GROUP = "botweave.platforms"


@cache
def installed_platforms() -> dict[str, PlatformSpec]:
    """Every installed platform by name; the console first, the rest alphabetically."""
    found: dict[str, PlatformSpec] = {}
    for entry in entry_points(group=GROUP):
        spec = entry.load()
        if not isinstance(spec, PlatformSpec):
            raise TypeError(f"entry point {entry.name} = {entry.value} is not a botweave PlatformSpec")
        found[spec.name] = spec
    return dict(sorted(found.items(), key=lambda item: (item[0] != "console", item[0])))
