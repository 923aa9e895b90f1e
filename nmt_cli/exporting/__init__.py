"""nmt's models written for other engines (`nmt export`): CTranslate2, through its own spec API.

The model package stays free of any engine's format; this package reads the model's modules and
fills the other engine's description of them.
"""
