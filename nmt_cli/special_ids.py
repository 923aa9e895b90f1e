"""The fixed ids of sentencepiece's special pieces: `nmt prepare` trains every vocabulary with
them (data/spm.py), and data, model and search rely on them; imported vocabularies are renumbered
to them (importing/vocabulary.py)."""

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
