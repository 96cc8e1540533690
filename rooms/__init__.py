"""botweave rooms."""
