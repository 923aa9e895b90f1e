"""The Transformer model core: pure nn.Module code with no I/O."""

from nmt_cli.model.transformer import DecoderState, Transformer, count_parameters

__all__ = ["DecoderState", "Transformer", "count_parameters"]
