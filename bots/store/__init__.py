"""The state store: one interface (base.py), a backend per module, chosen by URL (url.py),
what a store operation can raise (errors.py), the patience that waits out a store's short
outages (patience.py, patient.py), and the carrier of
received items each backend hands out (carrier.py: the journal, or Redis's shared stream)."""

from botweave.store.base import (
    Append,
    LogEntry,
    LogFeed,
    LogSlice,
    Operation,
    Put,
    Remove,
    Store,
    redact_url,
)
from botweave.store.carrier import InboundCarrier
from botweave.store.errors import StoreOutage, StoreUnavailable, store_failures
from botweave.store.memory import MemoryStore
from botweave.store.patience import Patience
from botweave.store.patient import PatientStore
from botweave.store.sqlite import SQLiteStore
from botweave.store.url import is_shared, open_store

__all__ = [
    "Append",
    "InboundCarrier",
    "LogEntry",
    "LogFeed",
    "LogSlice",
    "MemoryStore",
    "Operation",
    "Patience",
    "PatientStore",
    "Put",
    "Remove",
    "SQLiteStore",
    "Store",
    "StoreOutage",
    "StoreUnavailable",
    "is_shared",
    "open_store",
    "redact_url",
    "store_failures",
]
