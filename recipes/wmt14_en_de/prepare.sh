#!/usr/bin/env bash
# Download WMT14 English-German and prepare it for `nmt train` (see README.md).
# Training data as in Vaswani et al. (2017, §5.1): Europarl v7 + Common Crawl +
# News Commentary v9, about 4.5M sentence pairs. Valid: newstest2013; test: the
# full newstest2014 (3,003 lines). Shared sentencepiece BPE of 37,000 pieces.
# Needs internet, wget, tar, and `nmt` and `sacrebleu` on PATH.
#
# Usage: recipes/wmt14_en_de/prepare.sh [WORK_DIR]     (default: ./wmt14_en_de)
# Writes WORK_DIR/orig (archives), WORK_DIR/raw (plain text), WORK_DIR/data (for --data).
set -euo pipefail

# The tools first: one found missing after the downloads would cost hours.
for tool in wget tar nmt sacrebleu; do
    if ! command -v "$tool" >/dev/null; then
        echo "$0: $tool is not on PATH; install it (nmt and sacrebleu: make setup, then put .venv/bin on PATH)" >&2
        exit 2
    fi
done

work=${1:-wmt14_en_de}
mkdir -p "$work/orig" "$work/raw"

# 1. The WMT14 training archives (wget -c resumes and skips finished downloads).
for url in \
    https://statmt.org/wmt13/training-parallel-europarl-v7.tgz \
    https://statmt.org/wmt13/training-parallel-commoncrawl.tgz \
    https://statmt.org/wmt14/training-parallel-nc-v9.tgz; do
    wget -c -P "$work/orig" "$url"
    tar -xzf "$work/orig/$(basename "$url")" -C "$work/orig"
done

# 2. One parallel corpus: train.en / train.de, aligned line by line.
corpora=(training/europarl-v7.de-en commoncrawl.de-en training/news-commentary-v9.de-en)
for lang in en de; do
    for corpus in "${corpora[@]}"; do cat "$work/orig/$corpus.$lang"; done > "$work/raw/train.$lang"
done

# 3. Valid = newstest2013 (the paper's dev set), test = newstest2014, full version.
sacrebleu -t wmt13 -l en-de --echo src > "$work/raw/valid.en"
sacrebleu -t wmt13 -l en-de --echo ref > "$work/raw/valid.de"
sacrebleu -t wmt14/full -l en-de --echo src > "$work/raw/test.en"
sacrebleu -t wmt14/full -l en-de --echo ref > "$work/raw/test.de"
wc -l "$work"/raw/*

# 4. Joint BPE (37k, §5.1), encode, filter, binarize.
nmt prepare --train "$work/raw/train" --valid "$work/raw/valid" --test "$work/raw/test" \
    --src en --tgt de --out "$work/data" --vocab-size 37000 --workers "$(nproc)"
