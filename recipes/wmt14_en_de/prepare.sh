#!/usr/bin/env bash
# Download WMT14 English-German and prepare it for `nmt train` (see README.md).
# Training data as in Vaswani et al. (2017, §5.1): Europarl v7 + Common Crawl +
# News Commentary v9, about 4.5M sentence pairs. Valid: newstest2013; test: the
# full newstest2014 (3,003 lines). Shared sentencepiece BPE of 37,000 pieces.
# Needs the internet (or WMT_MIRROR / WMT_ARCHIVES and a sacreBLEU cache: see
# ../wmt14_prepare.sh), wget, tar, zcat, and `nmt` and `sacrebleu` on PATH.
#
# Usage: recipes/wmt14_en_de/prepare.sh [WORK_DIR [NMT PREPARE OPTIONS]]  (default: ./wmt14_en_de)
# Writes WORK_DIR/orig (archives), WORK_DIR/raw (plain text), WORK_DIR/data (for --data).
tgt=de
vocab_size=37000
default_work=wmt14_en_de
archives=(
    wmt13/training-parallel-europarl-v7.tgz
    wmt13/training-parallel-commoncrawl.tgz
    wmt14/training-parallel-nc-v9.tgz
)
corpora=(training/europarl-v7.de-en commoncrawl.de-en training/news-commentary-v9.de-en)
prepare_options=()
source "$(dirname "$0")/../wmt14_prepare.sh"
