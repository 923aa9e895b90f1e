"""Text <-> ids for models whose pieces are not a sentencepiece model's: Moses tokenization with
subword-nmt BPE, as fairseq's WMT models use (`nmt import`). Both steps are sacremoses' and
subword-nmt's own code, with fairseq's settings: Moses escaping and aggressive dash splits, and
BPE pieces joined by "@@ ".

A `MosesBpe` has the methods of sentencepiece's processor that decoding uses (`encode`,
`decode`, `id_to_piece`, `piece_to_id`, `get_piece_size`), so translation takes either.
"""

from __future__ import annotations

import io
from typing import Any

from nmt_cli.config import UNK_ID
from nmt_cli.data import spm
from nmt_cli.errors import InputError

KIND = "moses-subword-nmt"
SEPARATOR = "@@"


def description(pieces: list[str], codes: str, language: str) -> dict[str, Any]:
    """What a checkpoint stores to rebuild the tokenizer: pieces in id order, the BPE codes, and
    the language whose Moses rules apply."""
    return {"kind": KIND, "pieces": pieces, "codes": codes, "language": language}


def processors(spm_models: dict[str, bytes], tokenizers: dict[str, dict[str, Any]] | None) -> tuple[Any, Any]:
    """The (source, target) text <-> ids converters of a checkpoint: its sentencepiece models, or
    the tokenizers an imported model came with."""
    if tokenizers is not None:
        return MosesBpe(tokenizers["src"]), MosesBpe(tokenizers["tgt"])
    return spm.load_processor(spm_models["src"]), spm.load_processor(spm_models["tgt"])


class MosesBpe:
    def __init__(self, spec: dict[str, Any]) -> None:
        try:
            from sacremoses import MosesDetokenizer, MosesTokenizer
            from subword_nmt.apply_bpe import BPE
        except ImportError:
            raise InputError(
                'this model is tokenized with Moses and subword-nmt BPE: pip install "nmt-cli[import]"'
            ) from None
        self.pieces: list[str] = list(spec["pieces"])
        self.ids = {piece: i for i, piece in enumerate(self.pieces)}
        self.tokenizer = MosesTokenizer(spec["language"])
        self.detokenizer = MosesDetokenizer(spec["language"])
        self.bpe = BPE(io.StringIO(spec["codes"]), separator=SEPARATOR)

    def encode(self, text: str) -> list[int]:
        words = self.tokenizer.tokenize(text, aggressive_dash_splits=True, return_str=True, escape=True)
        return [self.ids.get(piece, UNK_ID) for piece in self.bpe.process_line(words).split()]

    def decode(self, ids: list[int]) -> str:
        text = " ".join(self.pieces[i] for i in ids)
        words = (text + " ").replace(SEPARATOR + " ", "").rstrip()
        return str(self.detokenizer.detokenize(words.split()))

    def id_to_piece(self, i: int) -> str:
        return self.pieces[i]

    def piece_to_id(self, piece: str) -> int:
        return self.ids.get(piece, UNK_ID)

    def get_piece_size(self) -> int:
        return len(self.pieces)
