"""`nmt serve`: batching across requests, and the HTTP app over it."""
