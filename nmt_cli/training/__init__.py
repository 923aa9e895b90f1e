"""Training (§5): `loop` runs the updates in order, with `loss` (label-smoothed cross entropy),
`schedule` (the learning rate), `precision` (autocast), `validate` (loss and BLEU on the valid
split), `distributed` (DDP under torchrun) and `signals` (Ctrl-C and SIGTERM save and stop).
"""
