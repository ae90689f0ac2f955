"""Suite-wide settings: no per-example deadline (CI machines are slow and noisy)."""

from hypothesis import settings

settings.register_profile("loopwatch", deadline=None, print_blob=True)
settings.load_profile("loopwatch")
