"""``python -m phasescope.testing --flavor vllm ...``: a fake server in its own process (see fakeserver)."""

from phasescope.testing.fakeserver import main

main()
