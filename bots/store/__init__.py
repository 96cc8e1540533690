"""The state store: one interface (base.py), a backend per module, chosen by URL (url.py)."""

from botweave.store.base import Store, StoreUnavailable, redact_url
from botweave.store.memory import MemoryStore
from botweave.store.url import open_store

__all__ = ["MemoryStore", "Store", "StoreUnavailable", "open_store", "redact_url"]
