"""Raw request records, clocks, exact-length prompts and statistics."""
