"""tunefleet.tuner: measure types, builders/runners, features, cost model, search, records."""
