"""phasescope — measure LLM inference prefill and decode apart, next to their physical ceilings."""

__version__ = "0.1.0"

__all__ = ["__version__"]
