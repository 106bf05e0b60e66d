"""Operations on the store that routes (and later the tuner and workers) share."""
