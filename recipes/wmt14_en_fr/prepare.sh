#!/usr/bin/env bash
# Download WMT14 English-French and prepare it for `nmt train` (see README.md).
# Training data as in Vaswani et al. (2017, §5.1; about 36M sentence pairs):
# Europarl v7 + Common Crawl + UN + News Commentary v9 + the 10^9 French-English
# corpus (giga-fren). Valid: newstest2013; test: the full newstest2014.
# Shared sentencepiece BPE of 32,000 pieces, learnt from a 10M-sentence sample
# (--spm-sample); every line is encoded. Needs the internet (or WMT_MIRROR /
# WMT_ARCHIVES and a sacreBLEU cache: see ../wmt14_prepare.sh), wget, tar, zcat,
# and `nmt` and `sacrebleu` on PATH; the corpora take tens of GB of disk.
#
# Usage: recipes/wmt14_en_fr/prepare.sh [WORK_DIR [NMT PREPARE OPTIONS]]  (default: ./wmt14_en_fr)
# Writes WORK_DIR/orig (archives), WORK_DIR/raw (plain text), WORK_DIR/data (for --data).
tgt=fr
vocab_size=32000
default_work=wmt14_en_fr
archives=(
    wmt13/training-parallel-europarl-v7.tgz
    wmt13/training-parallel-commoncrawl.tgz
    wmt13/training-parallel-un.tgz
    wmt14/training-parallel-nc-v9.tgz
    wmt10/training-giga-fren.tar
)
corpora=(training/europarl-v7.fr-en commoncrawl.fr-en un/undoc.2000.fr-en
         training/news-commentary-v9.fr-en giga-fren.release2.fixed)
prepare_options=(--spm-sample 10000000)
source "$(dirname "$0")/../wmt14_prepare.sh"
