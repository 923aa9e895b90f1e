"""nmt: the Transformer of "Attention Is All You Need" as a command-line toolkit."""

__version__ = "0.1.0"
