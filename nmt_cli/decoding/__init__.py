"""Decoding: from checked settings to translations.

`settings` holds the decode rules every front end goes through (`resolve`, `Sampling`); `search`
runs greedy and batched beam search over the model's incremental decoder, `sampling` the random
draws that replace the search; `translator` is the Python API (checkpoints in, strings out),
shared by `nmt translate`, `nmt attend`, `nmt serve` and the benchmarks; `workers` runs it in
forked processes of one thread each.
"""
