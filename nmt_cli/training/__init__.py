"""Training modules."""
