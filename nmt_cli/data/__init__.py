"""Data: from text files to batches of ids.

`text` reads lines (UTF-8 checked, one error naming the file and line); `spm` learns and applies
sentencepiece BPE; `vocabulary` is `nmt prepare`'s vocabulary (learned on a sample, or taken with
--spm-from); `corpus` writes and reads the binarized, memory-mappable corpus and its meta.json;
`batching` groups sentences by length into token-bounded batches.
"""
