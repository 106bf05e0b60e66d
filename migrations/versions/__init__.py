"""Migration scripts, oldest first by revision chain."""
