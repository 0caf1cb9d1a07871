"""Small helpers every layer may use: array modules (`xp`), row sums (`rows`), splits (`split`)."""
