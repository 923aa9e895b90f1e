"""Sentencepiece models re-numbered to an imported model's vocabulary.

Other toolkits map sentencepiece's pieces to model ids through a dictionary of their own; nmt
reads ids from the sentencepiece model itself, with pad 0, unk 1, bos 2 and eos 3. So an import
writes a copy of the toolkit's sentencepiece model whose pieces are the dictionary's, in the
order of the imported weights: segmentation and detokenization stay the toolkit's (same
normalizer, same scores), and every other command reads the result like one nmt learned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from nmt_cli.errors import InputError, optional_import_failure

SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")
"""nmt's ids 0-3 (config.PAD_ID, UNK_ID, BOS_ID, EOS_ID)."""


NEVER = -30.0
"""The output bias of a row the toolkit could not produce. Its probability, below e^-30 of the
likeliest piece's, leaves every other log-probability the same in float32 (a few dozen such rows
move the softmax sum by about 1e-12), and it costs label smoothing little when the model is
fine-tuned (eps / V x 30 nats a row, 0.03 nats for fairseq's 44 in the test model), where a far
larger bias would dominate the loss."""


@dataclass(frozen=True)
class Renumbering:
    """An imported vocabulary in nmt's id order."""

    pieces: list[str]
    """The pieces by nmt id: SPECIALS, the toolkit's other pieces in its own order, then the
    pieces its sentencepiece models have and its dictionary lacks."""
    rows: list[int | None]
    """For each nmt id, the toolkit's row: its own for its pieces, its <unk> for the pieces its
    dictionary lacks (which it reads as <unk>), None for a special it does not have."""
    never: list[int]
    """nmt ids the toolkit could never output: they get an output bias of NEVER."""

    def largest_id(self) -> int:
        """The largest of the toolkit's ids this vocabulary reads (-1 for none)."""
        return max((row for row in self.rows if row is not None), default=-1)

    def take(self, weight: torch.Tensor) -> torch.Tensor:
        """`weight`'s rows (or entries) in nmt's order; zeros for a special the toolkit lacks."""
        out = weight.new_zeros((len(self.rows), *weight.shape[1:]))
        known = [i for i, row in enumerate(self.rows) if row is not None]
        out[known] = weight[[self.rows[i] for i in known]]
        return out

    def output_bias(self, bias: torch.Tensor | None = None) -> torch.Tensor:
        """The toolkit's output bias (none: zeros) in nmt's order, NEVER on the rows it lacks."""
        out = self.take(bias) if bias is not None else torch.zeros(len(self.rows))
        out[self.never] = NEVER
        return out


def renumber(
    toolkit_pieces: list[str],
    specials: dict[str, str],
    spm_models: list[bytes],
    names: list[str] | None = None,
) -> Renumbering:
    """`toolkit_pieces` (the toolkit's pieces by its ids) in nmt's order. `specials` names the
    toolkit's piece for each of nmt's SPECIALS it has (e.g. {"<pad>": "<pad>", "</s>": "</s>"}).
    The pieces of `spm_models` that the toolkit lacks stay in the vocabulary: sentencepiece's BPE
    needs them to merge through, and a word that ends as one of them reads as <unk>, as in the
    toolkit. `names`: the models' files, for errors."""
    index = {piece: i for i, piece in enumerate(toolkit_pieces)}
    if len(index) != len(toolkit_pieces):
        raise InputError("the imported dictionary lists a piece twice; it cannot be an id table")
    rows: list[int | None] = [index[specials[name]] if name in specials else None for name in SPECIALS]
    taken = {row for row in rows if row is not None}
    rest = [i for i in range(len(toolkit_pieces)) if i not in taken]
    pieces = list(SPECIALS) + [toolkit_pieces[i] for i in rest]
    known = set(pieces)
    extra: list[str] = []
    for model, name in zip(spm_models, names or ["a sentencepiece model"] * len(spm_models), strict=True):
        for piece in _normal_pieces(model, name):
            if piece not in known:
                known.add(piece)
                extra.append(piece)
    unk = rows[SPECIALS.index("<unk>")]
    never = [i for i, row in enumerate(rows) if row is None]
    never += range(len(pieces), len(pieces) + len(extra))
    return Renumbering(pieces + extra, rows + list(rest) + [unk] * len(extra), never)


def renumbered_model(model: bytes, pieces: list[str], what: str, unk_surface: str | None = None) -> bytes:
    """A copy of the sentencepiece `model` whose pieces are `pieces` (ids in that order, starting
    with SPECIALS, holding every piece of the model). A piece the model lacks (fairseq's padding
    words, the other language's pieces of a joint table) is kept as unused: never produced.
    `unk_surface`: how an <unk> reads in a translation, as the toolkit writes it (sentencepiece's
    own " \u2047 " otherwise)."""
    pb = _protobuf()
    proto = _parse(model, what)
    known = {entry.piece: entry for entry in proto.pieces}
    kinds = pb.ModelProto.SentencePiece
    out = pb.ModelProto()
    out.CopyFrom(proto)
    del out.pieces[:]
    special_kinds = (kinds.CONTROL, kinds.UNKNOWN, kinds.CONTROL, kinds.CONTROL)
    for i, piece in enumerate(pieces):
        entry = out.pieces.add()
        entry.piece = piece
        old = known.get(piece)
        if i < len(SPECIALS):
            entry.type, entry.score = special_kinds[i], 0.0
        elif old is not None and old.type in _KEPT:
            entry.type, entry.score = old.type, old.score
        else:
            entry.type, entry.score = kinds.UNUSED, 0.0
    spec = out.trainer_spec
    spec.vocab_size = len(pieces)
    spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = 0, 1, 2, 3
    spec.pad_piece, spec.unk_piece, spec.bos_piece, spec.eos_piece = SPECIALS
    if unk_surface is not None:
        spec.unk_surface = unk_surface
    return bytes(out.SerializeToString())


# sentencepiece's NORMAL, USER_DEFINED and BYTE piece types: the pieces text is split into.
_KEPT = (1, 4, 6)


def _normal_pieces(model: bytes, what: str) -> list[str]:
    return [entry.piece for entry in _parse(model, what).pieces if entry.type in _KEPT]


def _protobuf() -> Any:
    try:
        from sentencepiece import sentencepiece_model_pb2  # generated code: no types
    except ImportError as err:
        missing = 'importing needs protobuf to rewrite sentencepiece models: pip install "nmt-cli[import]"'
        raise optional_import_failure(err, missing, "protobuf", ("google", "google.protobuf")) from None
    return sentencepiece_model_pb2


def _parse(model: bytes, what: str) -> Any:
    proto = _protobuf().ModelProto()
    try:
        proto.ParseFromString(model)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise InputError(f"{what}: not a sentencepiece model") from None
    return proto
