"""The package version, in a module of its own so that every part can read it without importing the
public API on top (phasescope/__init__)."""

__version__ = "0.1.0"
