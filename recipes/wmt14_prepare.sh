# The steps of recipes/wmt14_en_de/prepare.sh and recipes/wmt14_en_fr/prepare.sh, which set
# `tgt`, `vocab_size`, `archives` (paths below the mirror), `corpora` (extracted files without
# the language suffix; a .gz beside one is read as it is), `prepare_options` and `default_work`,
# then source this.
#
# Environment:
#   WMT_MIRROR    where the archives are downloaded from (default https://statmt.org), e.g. a
#                 mirror holding the same paths: $WMT_MIRROR/wmt13/training-parallel-europarl-v7.tgz
#   WMT_ARCHIVES  a folder already holding the archives (by file name): used in place, no download
#   SACREBLEU     sacreBLEU's cache (default ~/.sacrebleu): test sets found there need no network
#
# Each step is skipped when its output is complete, so a rerun after a failure neither downloads
# nor re-encodes what is done. Arguments after WORK_DIR go to `nmt prepare` (e.g. --workers 4).
set -euo pipefail

me=$0
fail() {
    echo "$me: $*" >&2
    exit 2
}

# The tools first: one found missing after the downloads would cost hours.
for tool in wget tar zcat nmt sacrebleu; do
    command -v "$tool" >/dev/null \
        || fail "$tool is not on PATH; install it (nmt and sacrebleu: make setup, then put .venv/bin on PATH)"
done

work=${1:-$default_work}
shift $(($# > 0 ? 1 : 0))
mirror=${WMT_MIRROR:-https://statmt.org}
mirror=${mirror%/}
local_dir=${WMT_ARCHIVES:-}
if [[ -n $local_dir && ! -d $local_dir ]]; then
    fail "WMT_ARCHIVES=$local_dir is not a folder; set it to the folder holding the archives, or unset it"
fi

# 0. Before any work: each archive is extracted or downloaded already, in WMT_ARCHIVES, or reachable.
for archive in "${archives[@]}"; do
    name=$(basename "$archive")
    done_here=$work/orig/$name
    if [[ -e $done_here.extracted || -e $done_here.downloaded || (-n $local_dir && -f $local_dir/$name) ]]; then
        continue
    fi
    wget -q --spider --tries=1 --timeout=30 "$mirror/$archive" \
        || fail "cannot reach $mirror/$archive and WMT_ARCHIVES holds no $name; check the network, or set WMT_MIRROR to a mirror or WMT_ARCHIVES to a folder with the archives"
done
mkdir -p "$work/orig" "$work/raw"

# 1. Valid = newstest2013 (the paper's dev set), test = newstest2014, full version: small, so
#    they come first, from sacreBLEU's cache or its download.
test_set() { # NAME FIELD OUT
    [[ -s $3 ]] && return
    if ! sacrebleu -t "$1" -l "en-$tgt" --echo "$2" >"$3.part" 2>"$3.log"; then
        local why
        why=$(grep -v '^[[:space:]]*$' "$3.log" | tail -n 1 || true)
        rm -f "$3.part" "$3.log"
        fail "sacrebleu could not give $1 en-$tgt from its cache (${SACREBLEU:-~/.sacrebleu}) or the network: $why"
    fi
    rm -f "$3.log"
    mv "$3.part" "$3"
}
test_set wmt13 src "$work/raw/valid.en"
test_set wmt13 ref "$work/raw/valid.$tgt"
test_set wmt14/full src "$work/raw/test.en"
test_set wmt14/full ref "$work/raw/test.$tgt"

# 2. The training archives (wget -c resumes a partial download), each extracted once.
for archive in "${archives[@]}"; do
    name=$(basename "$archive")
    [[ -e $work/orig/$name.extracted ]] && continue
    file=$work/orig/$name
    if [[ -n $local_dir && -f $local_dir/$name ]]; then
        file=$local_dir/$name
    elif [[ ! -e $work/orig/$name.downloaded ]]; then
        wget -c -nv -P "$work/orig" "$mirror/$archive"
        touch "$work/orig/$name.downloaded"  # an offline rerun extracts it without the network
    fi
    tar -xf "$file" -C "$work/orig"
    touch "$work/orig/$name.extracted"
done

# 3. One parallel corpus: train.en / train.$tgt, aligned line by line.
for lang in en "$tgt"; do
    out=$work/raw/train.$lang
    [[ -s $out ]] && continue
    for corpus in "${corpora[@]}"; do
        if [[ -f $work/orig/$corpus.$lang.gz ]]; then
            zcat "$work/orig/$corpus.$lang.gz"
        else
            cat "$work/orig/$corpus.$lang"
        fi
    done >"$out.part"
    mv "$out.part" "$out"
done
wc -l "$work"/raw/*

# 4. Joint BPE (§5.1), encode, filter, binarize; data/meta.json is written last.
if [[ -f $work/data/meta.json ]]; then
    echo "$me: $work/data is prepared already; remove it to prepare again" >&2
    exit 0
fi
nmt prepare --train "$work/raw/train" --valid "$work/raw/valid" --test "$work/raw/test" \
    --src en --tgt "$tgt" --out "$work/data" --vocab-size "$vocab_size" --workers "$(nproc)" ${prepare_options[@]+"${prepare_options[@]}"} "$@"
