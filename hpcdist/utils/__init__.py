"""Small helpers every layer may use: arrays (`xp`), row sums, splits, waits, private files."""
