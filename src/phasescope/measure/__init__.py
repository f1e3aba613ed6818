"""Raw request records, clocks and statistics (exact-length prompts: :mod:`phasescope.prompting`)."""
