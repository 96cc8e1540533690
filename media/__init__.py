"""Media: what agents are given of the photos, documents and voice notes people send."""

from botweave.media.reader import MediaReader, MediaStep, Reading, has_vision

__all__ = ["MediaReader", "MediaStep", "Reading", "has_vision"]
