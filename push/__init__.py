"""botweave push."""
