"""Models trained by other toolkits, read into nmt's Transformer (`nmt import`).

Each reader returns an `Imported`: a model config in nmt's terms, the weights under nmt's names
with nmt's vocabulary layout, and sentencepiece models whose ids are that layout. What a reader
cannot express in nmt's model is refused in one line naming the setting.
"""
