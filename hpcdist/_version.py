"""Version of hpcdist."""

__version__ = "0.1.0"
