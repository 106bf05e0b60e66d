"""tunefleet.worker: the measurement daemon for a target host."""
