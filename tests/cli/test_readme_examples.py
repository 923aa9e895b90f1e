"""The README's examples, run. Every command of README.md's ```sh blocks and every ```python block
runs here, in README order, in one scratch directory laid out with the files the README names, so
that an example that stops working fails this test:

- `corpus/train`, `corpus/valid`, `corpus/test`, `corpus/synthetic`, `indomain/*`, `test.en`,
  `test.de` and `sentences.en` are copy-task text (helpers' `sentences`) in "en" and "de";
  `recipes` is this checkout's; `fairseq-run/` is the fairseq fixture of tests/fixtures;
  `en-de.pt` and `de-en.pt` are conftest's `pairs` (two tiny language pairs); `keys.txt` holds one key.
  Every other file an example reads is made by an example before it (the five commands make
  `data`, `runs/mine` and `avg.pt`).
- Each `nmt` command gets EXTRAS after its own options, the later value winning: `nmt train`
  trains the tests' tiny model on one CPU thread for TRAIN_UPDATES updates, `nmt prepare` learns
  a 100-piece vocabulary (the copy task has 16 words), decoding runs on one CPU thread.
- SUBSTITUTIONS replace README names that a tiny run cannot have (checkpoint_10000.pt) or that
  stand for other files (newstest2014.de).
- `nmt serve` starts as a real process on 127.0.0.1 with an ephemeral port (serve_helpers'
  running_server) and one worker; the `curl` lines go to the server the README started on the port
  they name, and must answer JSON without an "error".

`nmt` commands without shell syntax run in this process (helpers' `nmt`); the others (pipes,
`echo`, `curl`) run in bash, where `nmt` is a small script that adds the same EXTRAS. Commands that
cannot run offline or need what this test cannot give are listed in NOT_RUN with the reason. A
command neither runnable here nor listed fails the test, and so does a listed one (or a
substitution) that the README no longer has: a new README example must be handled here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import FAST_TRAIN, TINY_MODEL, Pairs, nmt, one_thread, sentences, sets, subprocess_env

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FAIRSEQ = ROOT / "tests" / "fixtures" / "fairseq-multi30k-tiny"

sys.path.insert(0, str(ROOT / "tests" / "serve"))
from serve_helpers import Server, running_server  # noqa: E402

TRAIN_UPDATES = 30
SAVE_EVERY = 5

EXTRAS: dict[str, list[str]] = {
    "prepare": ["--vocab-size", "100", "--no-byte-fallback"],
    "train": [
        *("--device", "cpu", "--threads", "1"),
        *sets(
            *TINY_MODEL,
            *FAST_TRAIN,
            "train.update_tokens=0",
            "train.update_freq=1",
            f"train.max_updates={TRAIN_UPDATES}",
            f"train.save_every_updates={SAVE_EVERY}",
            f"train.valid_every_updates={TRAIN_UPDATES}",
            "train.keep_last=10",
        ),
    ],
    "translate": ["--device", "cpu", "--threads", "1"],
    "attend": ["--device", "cpu", "--threads", "1"],
    "serve": ["--workers", "1"],
}

# README text -> what runs here.
SUBSTITUTIONS = {
    "checkpoint_9000.pt": f"checkpoint_{TRAIN_UPDATES - SAVE_EVERY}.pt",
    "checkpoint_10000.pt": f"checkpoint_{TRAIN_UPDATES}.pt",
    "-m a.pt -m b.pt": f"-m runs/base/checkpoints/checkpoint_{TRAIN_UPDATES - SAVE_EVERY}.pt"
    f" -m runs/base/checkpoints/checkpoint_{TRAIN_UPDATES}.pt",
    "--ref newstest2014.de --hyp hyp.de": "--ref test.de --hyp test.hyp",
    # German has letters the copy-task vocabulary lacks: a phrase of it would be refused there.
    '"Fahrrad"': '"silver"',
}

NOT_RUN = {
    "make setup TORCH=torch": "installs torch and the extras from PyPI",
    "make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu": "installs torch from PyTorch's index",
    "make demo": "minutes of training; tests/integration/test_pipeline.py runs the demo shortened",
    "make test": "the whole test suite, this test included",
    'pip install "nmt-cli[serve]"': "installs from PyPI",
    'pip install "nmt-cli[import]"': "installs from PyPI",
    "hf download Helsinki-NLP/opus-mt-en-de --local-dir opus-mt-en-de": (
        "downloads a model from the Hugging Face hub"
    ),
    "nmt import opus-mt-en-de -o en-de.pt": (
        "imports the download above; tests/cli/test_import_marian.py imports random MarianMTModels"
    ),
    "nmt translate -m en-de.pt -i news.en -o news.de": "translates with the model downloaded above",
    "curl -L https://dl.fbaipublicfiles.com/fairseq/models/wmt14.en-fr.joined-dict.transformer.tar.bz2"
    " | tar xj": "downloads fairseq's WMT14 En-Fr model (GBs)",
    "nmt import wmt14.en-fr.joined-dict.transformer/model.pt -o wmt14-en-fr.pt": (
        "imports the download above; tests/cli/test_import.py imports a Moses + BPE fairseq fixture"
    ),
    "nmt translate -m wmt14-en-fr.pt --beam 4 --lenpen 0.6 -i newstest2014.en -o newstest2014.fr": (
        "translates with the model downloaded above"
    ),
}

SHELL_FENCES = {"sh", "bash", "shell", "console"}
PYTHON_FENCES = {"python", "py"}
SHOWN_FENCES = {"", "text"}  # output as a command prints it: nothing to run
PROGRAMS = {"nmt", "echo", "curl"}  # what a runnable shell command may call
FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")
SERVER_PORT = re.compile(r"localhost:(\d+)")


@dataclass(frozen=True)
class Example:
    kind: str  # "shell": one command; "python": one block
    text: str  # the command (continuations joined, comment removed) or the block
    line: int  # where it starts in README.md

    def __str__(self) -> str:
        return f"README.md:{self.line}: {self.text}"


def without_comment(line: str) -> str:
    """The command without a trailing `# ...` (a # outside quotes, at the start or after a blank)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def examples(text: str) -> list[Example]:
    """The README's examples in order: each shell command, and each Python block whole."""
    found: list[Example] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        language, start = fence.group(2).lower(), i + 1
        end = next((j for j in range(start, len(lines)) if lines[j].strip() == "```"), None)
        assert end is not None, f"README.md:{i + 1}: a fence that is never closed"
        body = lines[start:end]
        i = end + 1
        if language in PYTHON_FENCES:
            found.append(Example("python", "\n".join(body), start + 1))
        elif language in SHELL_FENCES:
            command, first = "", 0
            for number, line in enumerate(body, start + 1):
                if not command and (not line.strip() or line.lstrip().startswith("#")):
                    continue
                first = first or number
                if line.rstrip().endswith("\\"):
                    command += line.rstrip()[:-1].strip() + " "
                    continue
                found.append(Example("shell", without_comment(command + line.strip()), first))
                command, first = "", 0
        elif language not in SHOWN_FENCES:
            pytest.fail(f"README.md:{start}: a ```{language} block: run it here or say why not")
    return found


def readme_examples() -> list[Example]:
    return examples(README.read_text(encoding="utf-8"))


def programs(command: str) -> list[str]:
    """The first word of each part of a pipeline."""
    return [part.split()[0] for part in command.split(" | ") if part.split()]


def substituted(command: str) -> str:
    for old, new in SUBSTITUTIONS.items():
        command = command.replace(old, new)
    return command


def needs_shell(command: str) -> bool:
    """Pipes, redirections, variables or another program than nmt: bash runs it."""
    if "$" in command or "`" in command or not command.startswith("nmt "):
        return True
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    return any(token and set(token) <= set("|&;<>()") for token in lexer)


def with_extras(args: list[str]) -> list[str]:
    command = next((a for a in args if not a.startswith("-")), "")
    return [*args, *EXTRAS.get(command, [])]


WRAPPER = """#!{python}
# `nmt` for the README's shell examples: this checkout's CLI, with the test's EXTRAS after the options.
import json, os, sys
args = sys.argv[1:]
command = next((a for a in args if not a.startswith("-")), "")
extras = json.loads(os.environ["README_NMT_EXTRAS"]).get(command, [])
os.execv(sys.executable, [sys.executable, "-m", "nmt_cli", *args, *extras])
"""


def write_pair(prefix: Path, lines: list[str]) -> None:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for language in ("en", "de"):
        Path(f"{prefix}.{language}").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, pairs: Pairs) -> Path:
    """A scratch directory with the files the README's examples read and do not make themselves."""
    work = tmp_path_factory.mktemp("readme")
    write_pair(work / "corpus" / "train", sentences(2000, seed=0))
    write_pair(work / "corpus" / "valid", sentences(40, seed=1))
    write_pair(work / "corpus" / "test", sentences(40, seed=2))
    write_pair(work / "corpus" / "synthetic", sentences(200, seed=3))
    write_pair(work / "indomain" / "train", sentences(200, seed=4))
    write_pair(work / "indomain" / "valid", sentences(20, seed=5))
    write_pair(work / "test", sentences(30, seed=6))
    (work / "sentences.en").write_text("apple river\ngreen music paper\n", encoding="utf-8")
    # What the constraint and glossary examples read (their German as the copy task's words).
    (work / "constrained.en").write_text("apple river\tsilver\ngreen music\n", encoding="utf-8")
    (work / "terms.tsv").write_text("river\tsilver\n", encoding="utf-8")
    (work / "recipes").symlink_to(ROOT / "recipes")
    (work / "fairseq-run").mkdir()
    (work / "fairseq-run" / "checkpoint_best.pt").symlink_to(FAIRSEQ / "checkpoint.pt")
    for name in ("dict.en.txt", "dict.de.txt", "spm.model"):
        (work / "fairseq-run" / name).symlink_to(FAIRSEQ / name)
    (work / "en-de.pt").symlink_to(pairs.en_de)
    (work / "de-en.pt").symlink_to(pairs.de_en)
    (work / "keys.txt").write_text("readme-example-key\n", encoding="utf-8")
    bin_dir = work / ".bin"
    bin_dir.mkdir()
    (bin_dir / "nmt").write_text(WRAPPER.format(python=sys.executable), encoding="utf-8")
    (bin_dir / "nmt").chmod(0o755)
    return work


def test_every_example_is_run_or_listed() -> None:
    """Each shell command calls only what this test provides, or is in NOT_RUN with its reason;
    every entry of NOT_RUN and SUBSTITUTIONS is still in the README."""
    found = readme_examples()
    commands = [e.text for e in found if e.kind == "shell"]
    assert commands, "no shell examples found in README.md"
    unhandled = [
        str(e)
        for e in found
        if e.kind == "shell" and e.text not in NOT_RUN and not set(programs(e.text)) <= PROGRAMS
    ]
    assert not unhandled, "README examples neither run nor listed in NOT_RUN:\n" + "\n".join(unhandled)
    stale = [c for c in NOT_RUN if c not in commands]
    assert not stale, f"NOT_RUN lists commands the README no longer has: {stale}"
    runnable = [c for c in commands if c not in NOT_RUN]
    unused = [old for old in SUBSTITUTIONS if not any(old in c for c in runnable)]
    assert not unused, f"SUBSTITUTIONS the README's examples no longer need: {unused}"


def test_the_example_parser_reads_continuations_comments_and_fences() -> None:
    text = "\n".join(
        [
            "```sh",
            "# a comment line",
            "nmt prepare --train a \\",
            '    --train-tag "<BT> #1" --out d   # a comment',
            "",
            "curl -s localhost:8080/health",
            "```",
            "```",
            "BLEU = 1.0",
            "```",
            "```python",
            "print(1)",
            "```",
        ]
    )
    assert [(e.kind, e.text, e.line) for e in examples(text)] == [
        ("shell", 'nmt prepare --train a --train-tag "<BT> #1" --out d', 3),
        ("shell", "curl -s localhost:8080/health", 6),
        ("python", "print(1)", 12),
    ]
    assert needs_shell('echo "x" | nmt translate -m a.pt') and needs_shell("curl -s localhost:1/info")
    assert not needs_shell('nmt prepare --train-tag "<BT>" --out d')


def ended(code: int, out: str, err: str) -> str:
    return f"exit code {code}\nstdout:\n{out[-2000:]}\nstderr:\n{err[-3000:]}"


class Run:
    """The examples, one after another, in the workspace; servers kept until the end."""

    def __init__(self, work: Path, capfd: pytest.CaptureFixture[str], stack: contextlib.ExitStack) -> None:
        self.work, self.capfd, self.stack = work, capfd, stack
        self.servers: dict[str, Server] = {}  # the README's port -> the server started for it
        env = subprocess_env()
        env["PATH"] = f"{work / '.bin'}{os.pathsep}{env.get('PATH', '')}"
        env["README_NMT_EXTRAS"] = json.dumps(EXTRAS)
        self.env = env

    def fail(self, example: Example, what: str) -> None:
        pytest.fail(f"{example}\n  ran as: {substituted(example.text)}\n{what}")

    def __call__(self, example: Example) -> None:
        if example.kind == "python":
            self.python(example)
            return
        command = substituted(example.text)
        if command.startswith("nmt serve "):
            self.serve(example, shlex.split(command)[2:])
        elif command.startswith("curl "):
            self.curl(example, command)
        elif needs_shell(command):
            self.bash(example, command)
        else:
            with one_thread():
                code = nmt(*with_extras(shlex.split(command)[1:]))
            out, err = self.capfd.readouterr()
            if code != 0:
                self.fail(example, ended(code, out, err))

    def python(self, example: Example) -> None:
        with one_thread():
            try:
                code = compile(substituted(example.text), f"README.md:{example.line}", "exec")
                exec(code, {"__name__": "__readme__"})
            except Exception as exc:  # noqa: BLE001 - any error is the example's failure
                self.fail(example, f"raised {exc!r}")

    def bash(self, example: Example, command: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            self.fail(example, ended(done.returncode, done.stdout, done.stderr))
        return done

    def serve(self, example: Example, args: list[str]) -> None:
        """`nmt serve` as written but for --port (ephemeral) and --host (loopback)."""
        port, options, models = "8080", [], []
        i = 0
        while i < len(args):
            if args[i] in ("--port", "--host"):
                port = args[i + 1] if args[i] == "--port" else port
                i += 2
                continue
            if args[i] in ("-m", "--model"):
                models.append(args[i + 1])
                i += 2
                continue
            options.append(args[i])
            i += 1
        rest = [part for model in models[1:] for part in ("-m", model)]
        server = self.stack.enter_context(running_server(Path(models[0]), *rest, *options, *EXTRAS["serve"]))
        health = server.get("/health")
        if health.status_code != 200:
            self.fail(example, f"/health answered {health.status_code}: {health.text}\n{server.text()}")
        self.servers.setdefault(port, server)

    def curl(self, example: Example, command: str) -> None:
        port = SERVER_PORT.search(command)
        if port is None or port.group(1) not in self.servers:
            self.fail(example, f"no README server started on that port (started: {sorted(self.servers)})")
        server = self.servers[port.group(1)]
        done = self.bash(example, SERVER_PORT.sub(server.url.removeprefix("http://"), command))
        try:
            body = json.loads(done.stdout)
        except json.JSONDecodeError:
            body = {"error": f"not JSON: {done.stdout[:2000]!r}"}
        if "error" in body:
            self.fail(example, f"answered {body}\nthe server's log:\n{server.text()[-4000:]}")


@contextlib.contextmanager
def inside(work: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(work)
    try:
        yield
    finally:
        os.chdir(before)


def test_the_readme_examples_run(workspace: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Every README example that is not in NOT_RUN, in README order, against the tiny fixtures."""
    to_run = [e for e in readme_examples() if e.kind == "python" or e.text not in NOT_RUN]
    with contextlib.ExitStack() as stack, inside(workspace):
        run = Run(workspace, capfd, stack)
        for example in to_run:
            run(example)
        for server in run.servers.values():
            assert server.get("/health").status_code == 200
    # What the five commands of "Your own corpus" leave behind.
    assert (workspace / "avg.pt").is_file() and (workspace / "test.hyp.de").is_file()
    assert (workspace / "runs" / "mine" / "checkpoints" / "checkpoint_last.pt").is_file()


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", without_code(markdown), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def without_code(markdown: str) -> str:
    return re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("path", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_relative_links_resolve(path: Path) -> None:
    """Every relative link of the README and docs/ names a file that exists, and a heading there."""
    broken = []
    for target in LINK.findall(without_code(path.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(target)
        elif anchor and anchor not in anchors(linked.read_text(encoding="utf-8")):
            broken.append(target)
    assert not broken, f"{path.name}: links that do not resolve: {broken}"
