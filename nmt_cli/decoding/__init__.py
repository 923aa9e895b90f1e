"""Decoding: search, sampling, the `Translator` (the Python API) and its worker processes."""
