"""botweave adapters."""
