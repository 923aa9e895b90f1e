#!/usr/bin/env bash
# Download WMT14 English-French and prepare it for `nmt train` (see README.md).
# Training data as in Vaswani et al. (2017, §5.1; about 36M sentence pairs):
# Europarl v7 + Common Crawl + UN + News Commentary v9 + the 10^9 French-English
# corpus (giga-fren). Valid: newstest2013; test: the full newstest2014.
# Shared sentencepiece BPE of 32,000 pieces. Needs internet, wget, tar, gunzip,
# and `nmt` and `sacrebleu` on PATH; the corpora take tens of GB of disk.
#
# Usage: recipes/wmt14_en_fr/prepare.sh [WORK_DIR]     (default: ./wmt14_en_fr)
# Writes WORK_DIR/orig (archives), WORK_DIR/raw (plain text), WORK_DIR/data (for --data).
set -euo pipefail

# The tools first: one found missing after the downloads would cost hours.
for tool in wget tar gunzip nmt sacrebleu; do
    if ! command -v "$tool" >/dev/null; then
        echo "$0: $tool is not on PATH; install it (nmt and sacrebleu: make setup, then put .venv/bin on PATH)" >&2
        exit 2
    fi
done

work=${1:-wmt14_en_fr}
mkdir -p "$work/orig" "$work/raw"

# 1. The WMT14 training archives (wget -c resumes and skips finished downloads).
for url in \
    https://statmt.org/wmt13/training-parallel-europarl-v7.tgz \
    https://statmt.org/wmt13/training-parallel-commoncrawl.tgz \
    https://statmt.org/wmt13/training-parallel-un.tgz \
    https://statmt.org/wmt14/training-parallel-nc-v9.tgz \
    https://statmt.org/wmt10/training-giga-fren.tar; do
    wget -c -P "$work/orig" "$url"
    tar -xf "$work/orig/$(basename "$url")" -C "$work/orig"
done
gunzip -f "$work"/orig/giga-fren.release2.fixed.{en,fr}.gz

# 2. One parallel corpus: train.en / train.fr, aligned line by line.
corpora=(training/europarl-v7.fr-en commoncrawl.fr-en un/undoc.2000.fr-en
         training/news-commentary-v9.fr-en giga-fren.release2.fixed)
for lang in en fr; do
    for corpus in "${corpora[@]}"; do cat "$work/orig/$corpus.$lang"; done > "$work/raw/train.$lang"
done

# 3. Valid = newstest2013 (the paper's dev set), test = newstest2014, full version.
sacrebleu -t wmt13 -l en-fr --echo src > "$work/raw/valid.en"
sacrebleu -t wmt13 -l en-fr --echo ref > "$work/raw/valid.fr"
sacrebleu -t wmt14/full -l en-fr --echo src > "$work/raw/test.en"
sacrebleu -t wmt14/full -l en-fr --echo ref > "$work/raw/test.fr"
wc -l "$work"/raw/*

# 4. Joint BPE (32k, §5.1), encode, filter, binarize. Sentencepiece learns from a
#    10M-sentence sample (--spm-sample); every line is encoded.
nmt prepare --train "$work/raw/train" --valid "$work/raw/valid" --test "$work/raw/test" \
    --src en --tgt fr --out "$work/data" --vocab-size 32000 --spm-sample 10000000 --workers "$(nproc)"
