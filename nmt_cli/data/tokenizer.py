"""Text <-> ids for imported models that do not read text through a plain sentencepiece model
(`nmt import`):

- `MosesBpe`: Moses tokenization with subword-nmt BPE, as fairseq's WMT models use. Both steps
  are sacremoses' and subword-nmt's own code, with fairseq's settings: Moses escaping and
  aggressive dash splits, and BPE pieces joined by "@@ ". It travels as bytes where a
  sentencepiece model would (`serialized`), and `spm.load_processor` reads either, so that
  prepare, train, translate and export take it as they take sentencepiece.
- `LanguageCodes`: sentencepiece, after Marian's rule for multilingual models: a leading
  `>>xx<<` (the target language) is one piece of its own, not sentencepiece's.

Both have the methods of sentencepiece's processor that decoding uses (`encode`, `decode`,
`id_to_piece`, `piece_to_id`, `get_piece_size`), so translation takes any of the three.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

from nmt_cli.errors import InputError, optional_import_failure
from nmt_cli.special_ids import UNK_ID

KIND = "moses-subword-nmt"
LANGUAGE_CODES = "sentencepiece-language-codes"
SEPARATOR = "@@"


def serialized(pieces: list[str], codes: str, language: str) -> bytes:
    """A Moses + BPE tokenizer as the bytes that stand where a sentencepiece model's would (in a
    checkpoint, a prepared corpus): pieces in id order, the BPE codes, the language of the Moses
    rules, as JSON. A serialized sentencepiece model never starts with "{"."""
    spec = {"kind": KIND, "pieces": pieces, "codes": codes, "language": language}
    return json.dumps(spec, ensure_ascii=False, sort_keys=True).encode("utf-8")


def is_serialized(model: bytes) -> bool:
    return model[:1] == b"{"


def deserialized(model: bytes) -> MosesBpe:
    try:
        spec = json.loads(model.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise InputError("a vocabulary model that is neither sentencepiece nor Moses + BPE") from None
    if not isinstance(spec, dict) or spec.get("kind") != KIND:
        raise InputError("a vocabulary model that is neither sentencepiece nor Moses + BPE")
    return MosesBpe(spec)


class LanguageCodes:
    """A sentencepiece processor behind Marian's rule for target-language codes: a line that starts
    with `>>xx<<` has that code as its first piece, and sentencepiece reads the rest."""

    CODE = re.compile(r">>.+?<<")

    def __init__(self, processor: Any) -> None:
        self.processor = processor

    def encode(self, text: str | list[str], num_threads: int = 1) -> Any:
        """The ids of `text`, or of each line of a list (as sentencepiece's encode)."""
        if isinstance(text, list):
            return [self.encode(line) for line in text]
        code = self.CODE.match(text)
        if code is None:
            return list(self.processor.encode(text))
        rest = list(self.processor.encode(text[code.end() :]))
        return [self.processor.piece_to_id(code.group(0))] + rest

    def decode(self, ids: list[int]) -> str:
        return str(self.processor.decode(ids))

    def id_to_piece(self, i: int) -> str:
        return str(self.processor.id_to_piece(i))

    def piece_to_id(self, piece: str) -> int:
        return int(self.processor.piece_to_id(piece))

    def get_piece_size(self) -> int:
        return int(self.processor.get_piece_size())

    def unk_id(self) -> int:
        return int(self.processor.unk_id())


class MosesBpe:
    def __init__(self, spec: dict[str, Any]) -> None:
        missing = 'this model is tokenized with Moses and subword-nmt BPE: pip install "nmt-cli[import]"'
        try:
            from sacremoses import MosesDetokenizer, MosesTokenizer
        except ImportError as err:
            raise optional_import_failure(err, missing, "sacremoses") from None
        try:
            from subword_nmt.apply_bpe import BPE
        except ImportError as err:
            raise optional_import_failure(err, missing, "subword_nmt") from None
        self.spec = spec
        self.pieces: list[str] = list(spec["pieces"])
        self.ids = {piece: i for i, piece in enumerate(self.pieces)}
        self.tokenizer = MosesTokenizer(spec["language"])
        self.detokenizer = MosesDetokenizer(spec["language"])
        self.bpe = BPE(io.StringIO(spec["codes"]), separator=SEPARATOR)

    def encode(self, text: str | list[str], num_threads: int = 1) -> Any:
        """The ids of `text`, or of each line of a list (as sentencepiece's encode)."""
        if isinstance(text, list):
            return [self.encode(line) for line in text]
        words = self.tokenizer.tokenize(text, aggressive_dash_splits=True, return_str=True, escape=True)
        return [self.ids.get(piece, UNK_ID) for piece in self.bpe.process_line(words).split()]

    @property
    def codes(self) -> str:
        return self.spec["codes"]

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
