"""The WMT14 recipes' prepare.sh, end to end and offline: small archives with the member paths
of the real ones (those fairseq's examples/translation/prepare-wmt14en2{de,fr}.sh extract) are
served by a loopback HTTP server standing in for statmt.org (WMT_MIRROR) or lie in a local
folder (WMT_ARCHIVES); the test sets come from a sacreBLEU cache laid out as sacreBLEU itself
reads it. Then two updates are trained on what the script prepared."""

from __future__ import annotations

import functools
import gzip
import io
import os
import random
import socket
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers import FAST_TRAIN, TINY_MODEL, WORDS, sets, subprocess_env

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Pair:
    name: str
    tgt: str
    archives: dict[str, list[str]]  # path below the mirror -> the corpora inside (no language suffix)


PAIRS = {
    "wmt14_en_de": Pair(
        "wmt14_en_de",
        "de",
        {
            "wmt13/training-parallel-europarl-v7.tgz": ["training/europarl-v7.de-en"],
            "wmt13/training-parallel-commoncrawl.tgz": ["commoncrawl.de-en"],
            "wmt14/training-parallel-nc-v9.tgz": ["training/news-commentary-v9.de-en"],
        },
    ),
    "wmt14_en_fr": Pair(
        "wmt14_en_fr",
        "fr",
        {
            "wmt13/training-parallel-europarl-v7.tgz": ["training/europarl-v7.fr-en"],
            "wmt13/training-parallel-commoncrawl.tgz": ["commoncrawl.fr-en"],
            "wmt13/training-parallel-un.tgz": ["un/undoc.2000.fr-en"],
            "wmt14/training-parallel-nc-v9.tgz": ["training/news-commentary-v9.fr-en"],
            "wmt10/training-giga-fren.tar": ["giga-fren.release2.fixed"],  # members gzipped, as there
        },
    ),
}
LINES_PER_CORPUS = 40
# After the recipe's own options: the last one counts.
PREPARE = ["--vocab-size", "60", "--no-byte-fallback", "--workers", "1"]


def lines(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(3, 9))) for _ in range(count)]


def member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def make_archives(pair: Pair, folder: Path) -> dict[str, list[str]]:
    """The pair's archives below `folder` (as below the mirror); each language's training lines."""
    train: dict[str, list[str]] = {"en": [], pair.tgt: []}
    seed = 0
    for path, corpora in pair.archives.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(folder / path, "w:gz" if path.endswith(".tgz") else "w") as tar:
            for corpus in corpora:
                for lang in ("en", pair.tgt):
                    seed += 1
                    text = lines(seed, LINES_PER_CORPUS)
                    train[lang] += text
                    data = "".join(f"{line}\n" for line in text).encode()
                    if corpus.startswith("giga-fren"):
                        member(tar, f"{corpus}.{lang}.gz", gzip.compress(data))
                    else:
                        member(tar, f"{corpus}.{lang}", data)
    return train


def sacrebleu_cache(pair: Pair, cache: Path) -> dict[str, list[str]]:
    """newstest2013 and newstest2014 (full) in sacreBLEU's own cache layout; the lines by file."""
    expected = {}
    newstests = (("wmt13", "wmt13", "valid", 101), ("wmt14/full", "wmt14_full", "test", 202))
    for name, stem, split, seed in newstests:
        folder = cache / name
        folder.mkdir(parents=True)
        source, reference = lines(seed, 12), lines(seed + 1, 12)
        fields = {"src": source, "ref": reference, "docid": ["doc"] * 12, "genre": ["news"] * 12}
        fields["origlang"] = ["en"] * 12
        for field, text in fields.items():
            (folder / f"{stem}.en-{pair.tgt}.{field}").write_text("".join(f"{t}\n" for t in text))
        expected[f"{split}.en"], expected[f"{split}.{pair.tgt}"] = source, reference
    return expected


class Mirror:
    """statmt.org on 127.0.0.1: serves a folder and counts the requests it was sent."""

    def __init__(self, folder: Path) -> None:
        self.requests: list[str] = []
        mirror = self

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                mirror.requests.append(f"{self.command} {self.path}")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[Mirror]:
    served = Mirror(tmp_path / "statmt")
    yield served
    served.close()


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def tools(folder: Path) -> Path:
    """`nmt` and `sacrebleu` of this checkout and interpreter, for PATH."""
    folder.mkdir(exist_ok=True)
    for name, module in (("nmt", "nmt_cli"), ("sacrebleu", "sacrebleu")):
        script = folder / name
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {module} "$@"\n')
        script.chmod(0o755)
    return folder


def run_script(pair: Pair, work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = ROOT / "recipes" / pair.name / "prepare.sh"
    proxies = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
    # wget and sacreBLEU reach 127.0.0.1 or nothing (unless a test names a proxy)
    full = {name: value for name, value in subprocess_env().items() if name not in proxies}
    full.update(env, no_proxy="127.0.0.1", NO_PROXY="127.0.0.1")
    full["PATH"] = f"{tools(work.parent / 'bin')}{os.pathsep}{full['PATH']}"
    args = ["bash", str(script), str(work), *PREPARE]
    return subprocess.run(args, capture_output=True, text=True, env=full, timeout=600)


def train_two_updates(data: Path, pair: Pair, out: Path) -> None:
    recipe = ROOT / "recipes" / pair.name / "base.toml"
    overrides = sets(*TINY_MODEL, *FAST_TRAIN, "train.max_updates=2", "train.fit_batch=false")
    command = [sys.executable, "-m", "nmt_cli", "train", "--data", data, "--recipe", recipe, "--out", out]
    argv = [str(a) for a in (*command, *overrides, "--quiet")]
    done = subprocess.run(argv, capture_output=True, text=True, env=subprocess_env())
    assert done.returncode == 0, done.stderr
    assert (out / "checkpoints" / "checkpoint_last.pt").is_file()


@pytest.mark.parametrize("name", PAIRS)
def test_prepare_sh_offline_end_to_end_then_two_updates(name: str, tmp_path: Path, mirror: Mirror) -> None:
    pair = PAIRS[name]
    train = make_archives(pair, tmp_path / "statmt")
    cache = tmp_path / "sacrebleu"
    tests = sacrebleu_cache(pair, cache)
    work = tmp_path / "work"
    done = run_script(pair, work, {"WMT_MIRROR": mirror.url, "SACREBLEU": str(cache)})
    assert done.returncode == 0, done.stderr
    for lang, text in train.items():
        assert (work / "raw" / f"train.{lang}").read_text().splitlines() == text
    for file, text in tests.items():
        assert (work / "raw" / file).read_text().splitlines() == text
    assert (work / "data" / "meta.json").is_file()
    assert not list(work.rglob("*.part"))
    downloads = [r for r in mirror.requests if r.startswith("GET")]
    assert len(downloads) == len(pair.archives)

    # A second run finds every step done: no request, nothing encoded again.
    meta_written = (work / "data" / "meta.json").stat().st_mtime_ns
    requests = len(mirror.requests)
    again = run_script(pair, work, {"WMT_MIRROR": mirror.url, "SACREBLEU": str(cache)})
    assert again.returncode == 0, again.stderr
    assert len(mirror.requests) == requests
    assert (work / "data" / "meta.json").stat().st_mtime_ns == meta_written
    assert "prepared already" in again.stderr

    train_two_updates(work / "data", pair, tmp_path / "run")


def test_a_rerun_after_a_failed_step_downloads_nothing_again(tmp_path: Path, mirror: Mirror) -> None:
    pair = PAIRS["wmt14_en_de"]
    make_archives(pair, tmp_path / "statmt")
    cache = tmp_path / "sacrebleu"
    sacrebleu_cache(pair, cache)
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "data" / "meta.json").mkdir()  # nmt prepare cannot publish its corpus: the last step fails
    failed = run_script(pair, work, {"WMT_MIRROR": mirror.url, "SACREBLEU": str(cache)})
    assert failed.returncode != 0
    assert (work / "raw" / "train.de").is_file()
    (work / "data" / "meta.json").rmdir()
    requests = len(mirror.requests)
    done = run_script(pair, work, {"WMT_MIRROR": mirror.url, "SACREBLEU": str(cache)})
    assert done.returncode == 0, done.stderr
    assert len(mirror.requests) == requests
    assert (work / "data" / "meta.json").is_file()


def test_downloaded_archives_are_extracted_again_without_the_network(tmp_path: Path, mirror: Mirror) -> None:
    pair = PAIRS["wmt14_en_de"]
    train = make_archives(pair, tmp_path / "statmt")
    cache = tmp_path / "sacrebleu"
    sacrebleu_cache(pair, cache)
    work = tmp_path / "work"
    assert run_script(pair, work, {"WMT_MIRROR": mirror.url, "SACREBLEU": str(cache)}).returncode == 0
    # As a run that failed while extracting leaves it: the archives downloaded, nothing after.
    for marker in (work / "orig").glob("*.extracted"):
        marker.unlink()
    for made in (*(work / "raw").glob("train.*"), *(work / "data").iterdir()):
        made.unlink()
    (work / "data").rmdir()
    done = run_script(pair, work, {"WMT_MIRROR": closed_port(), "SACREBLEU": str(cache)})
    assert done.returncode == 0, done.stderr
    assert (work / "raw" / "train.de").read_text().splitlines() == train["de"]


def test_archives_in_a_local_folder_need_no_network(tmp_path: Path) -> None:
    pair = PAIRS["wmt14_en_fr"]
    train = make_archives(pair, tmp_path / "statmt")
    local = tmp_path / "archives"
    local.mkdir()
    for path in pair.archives:
        (tmp_path / "statmt" / path).rename(local / Path(path).name)
    cache = tmp_path / "sacrebleu"
    sacrebleu_cache(pair, cache)
    work = tmp_path / "work"
    env = {"WMT_MIRROR": closed_port(), "WMT_ARCHIVES": str(local), "SACREBLEU": str(cache)}
    done = run_script(pair, work, env)
    assert done.returncode == 0, done.stderr
    assert (work / "raw" / "train.fr").read_text().splitlines() == train["fr"]
    assert sorted(p.name for p in local.iterdir()) == sorted(Path(p).name for p in pair.archives)


@pytest.mark.parametrize("name", PAIRS)
def test_without_network_or_copies_one_line_before_any_work(name: str, tmp_path: Path) -> None:
    pair = PAIRS[name]
    work = tmp_path / "work"
    mirror = closed_port()
    done = run_script(pair, work, {"WMT_MIRROR": mirror, "SACREBLEU": str(tmp_path / "empty")})
    assert done.returncode == 2
    script = ROOT / "recipes" / pair.name / "prepare.sh"
    first = next(iter(pair.archives))
    assert done.stderr.splitlines() == [
        f"{script}: cannot reach {mirror}/{first} and WMT_ARCHIVES holds no {Path(first).name}; "
        "check the network, or set WMT_MIRROR to a mirror or WMT_ARCHIVES to a folder with the archives"
    ]
    assert not work.exists()


def test_test_sets_neither_cached_nor_reachable_one_line(tmp_path: Path, mirror: Mirror) -> None:
    pair = PAIRS["wmt14_en_de"]
    make_archives(pair, tmp_path / "statmt")
    work = tmp_path / "work"
    # sacreBLEU downloads through a proxy that is not there: as good as no network, and quick.
    nowhere = closed_port()
    env = {"WMT_MIRROR": mirror.url, "SACREBLEU": str(tmp_path / "empty")}
    done = run_script(pair, work, {**env, "https_proxy": nowhere, "http_proxy": nowhere})
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    script = ROOT / "recipes" / pair.name / "prepare.sh"
    assert line.startswith(f"{script}: sacrebleu could not give wmt13 en-de")
    assert not [r for r in mirror.requests if r.startswith("GET")]  # no archive downloaded
    assert not list((work / "raw").iterdir())
