"""Word alignments of translations, read from the model's own encoder-decoder attention.

While the search decodes, the decoder layer that aligns records its cross-attention, averaged
over heads (`DecoderState.watch`), and each chosen piece keeps the source piece it attended to
most while being predicted (`ensemble.Batch.stored`): no second pass over the translations.
`attended_pieces` computes the same links by a teacher-forced pass, the definition the search is
tested against. The links of pieces become links of words: a sentencepiece piece that starts with
"▁" starts a word, so words are what whitespace separates in the text. The result is a set of
(source word, target word) pairs, as Pharaoh's "i-j" format writes them (fairseq's
--print-alignment, Marian's --alignment).

Which layer: the one below the top by default. Attention there follows the source word being
translated more closely than at the top layer, whose attention also serves to predict the next
word (Garg et al., 2019, found the penultimate layer of six the best aligned);
`bench/html_tags.py` measures where tags land with each layer.
"""

from __future__ import annotations

import numpy as np
import torch
from sentencepiece import SentencePieceProcessor

from nmt_cli.data.batching import collate
from nmt_cli.model import Transformer

Alignment = tuple[tuple[int, int], ...]
"""(source word, target word) pairs, 0-based, sorted."""

WORD_START = "\u2581"  # sentencepiece's mark of a piece that follows whitespace


def default_layer(model: Transformer) -> int:
    """0-based decoder layer whose attention aligns: the one below the top (the top of one)."""
    return max(0, model.cfg.decoder_layers - 2)


def word_of_pieces(pieces: list[str]) -> list[int]:
    """The word index of each piece: a new word at each piece that starts with "▁"."""
    words, current = [], -1
    for i, piece in enumerate(pieces):
        if piece.startswith(WORD_START) or i == 0:
            current += 1
        words.append(current)
    return words


@torch.inference_mode()
def attended_pieces(
    model: Transformer, sources: list[np.ndarray], targets: list[list[int]], layer: int, batch: int = 64
) -> list[np.ndarray]:
    """For each target piece of each sentence, the source piece (of a non-empty source) it attends
    to most, EOS left out of both: teacher-forced passes over `batch` sentences at a time."""
    device = next(model.parameters()).device
    found: list[np.ndarray] = []
    for start in range(0, len(sources), batch):
        src, tgt = sources[start : start + batch], targets[start : start + batch]
        tensors = collate(src, [np.asarray(t, dtype=np.int64) for t in tgt], start_id=model.cfg.start_id)
        attention = model.cross_attention(tensors["src"].to(device), tensors["tgt_in"].to(device), layer)
        weights = attention.float().mean(dim=1).cpu()  # (B, T, S), the mean over heads
        for row, (s, t) in enumerate(zip(src, tgt, strict=True)):
            # Row j predicts target piece j; the source's EOS is left out.
            found.append(
                weights[row, : len(t), : len(s)].argmax(dim=1).numpy() if len(s) else np.zeros(len(t), int)
            )
    return found


def word_alignment(links: np.ndarray, src_pieces: list[str], tgt_pieces: list[str]) -> Alignment:
    """Piece links (target piece j -> source piece links[j]) as word links."""
    src_word, tgt_word = word_of_pieces(src_pieces), word_of_pieces(tgt_pieces)
    pairs = {(src_word[int(i)], tgt_word[j]) for j, i in enumerate(links) if j < len(tgt_word)}
    return tuple(sorted(pairs))


def aligned_words(
    links: list[int] | None,
    src_ids: np.ndarray,
    tgt_ids: list[int],
    src: SentencePieceProcessor,
    tgt: SentencePieceProcessor,
) -> Alignment:
    """A translation's word links from its piece links, with the pieces its ids stand for."""
    pieces = [src.id_to_piece(int(x)) for x in src_ids], [tgt.id_to_piece(x) for x in tgt_ids]
    return word_alignment(np.asarray(links or [], dtype=np.int64), *pieces)


def pharaoh(alignment: Alignment) -> str:
    """ "0-0 1-2 2-1": source-target pairs, as fairseq and Marian print them."""
    return " ".join(f"{i}-{j}" for i, j in alignment)
