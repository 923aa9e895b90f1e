"""Optional packages: every place nmt imports one tells a missing package (with the pip command
of its extra) from an installed one that fails to import (with that ImportError, the real
cause: e.g. huggingface_hub over a filelock it cannot use, which reads otherwise as "missing").
And every optional integration of the extras imports in this environment, deeply enough to
reach its own dependencies (huggingface_hub's file locks, transformers' Marian classes)."""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sentencepiece
from helpers import nmt

import nmt_cli.decoding
from nmt_cli.errors import InputError, NmtError
from nmt_cli.report import Reporter

PROTOBUF_MODEL = "sentencepiece.sentencepiece_model_pb2"  # sentencepiece's protobuf code
BROKEN = "cannot import name '_read_lock_file' from 'filelock._soft'"


class _Failing(importlib.abc.MetaPathFinder):
    """Fails the import of `module` and its submodules with `error`."""

    def __init__(self, module: str, error: ImportError) -> None:
        self.module, self.error = module, error

    def find_spec(self, name: str, path: object, target: object = None) -> None:
        if name == self.module or name.startswith(self.module + "."):
            raise self.error
        return None


@pytest.fixture
def fail_import(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, bool], None]]:
    """fail_import(module, installed): the next import of `module` fails as a missing package
    (installed=False) or as an installed one whose own imports break (installed=True)."""

    def install(module: str, installed: bool) -> None:
        error = ImportError(BROKEN) if installed else ModuleNotFoundError(f"No module named {module!r}")
        if not installed:
            error.name = module
        for name in [n for n in sys.modules if n == module or n.startswith(module + ".")]:
            monkeypatch.delitem(sys.modules, name)
        # The modules that import it at their top, so that they import it again.
        for name in ("nmt_cli.decoding.markup", "nmt_cli.decoding.html_parsing", PROTOBUF_MODEL):
            monkeypatch.delitem(sys.modules, name, raising=False)
        monkeypatch.delattr(nmt_cli.decoding, "markup", raising=False)
        monkeypatch.delattr(sentencepiece, PROTOBUF_MODEL.split(".")[1], raising=False)
        monkeypatch.setattr(sys, "meta_path", [_Failing(module, error), *sys.meta_path])

    yield install


def _translate_markup() -> None:
    from nmt_cli.decoding.translator import Translator

    Translator.translate_markup(object.__new__(Translator), [], None)  # type: ignore[arg-type]


def _moses_bpe() -> None:
    from nmt_cli.data.tokenizer import MosesBpe

    MosesBpe({"pieces": [], "language": "en"})


def _protobuf() -> None:
    from nmt_cli.importing.vocabulary import _protobuf

    _protobuf()


def _safetensors(folder: Path) -> None:
    from nmt_cli.importing.marian import _tensors

    (folder / "model.safetensors").write_bytes(b"")
    _tensors(folder)


def _serve() -> None:
    from nmt_cli.serving.app import require_extra

    require_extra()


def _detect() -> None:
    from nmt_cli.serving.detect import Detector

    Detector(["en", "de"])._loaded()


def _moses_de() -> None:
    from nmt_cli.commands.score import _moses_de

    _moses_de()


def _ctranslate2() -> None:
    from nmt_cli.commands.export import _import_ctranslate2

    _import_ctranslate2()


def _hub() -> None:
    from nmt_cli.commands.import_model import _local

    _local("hf:Helsinki-NLP/opus-mt-en-de", Reporter(quiet=True))


def _pictures() -> None:
    from nmt_cli.figures import require_matplotlib

    require_matplotlib()


# (the import site, the module it needs, what the "missing" line names)
SITES: list[tuple[Callable[..., None], str, str]] = [
    (_translate_markup, "lxml", 'pip install "nmt-cli[html]"'),
    (_moses_bpe, "sacremoses", 'pip install "nmt-cli[import]"'),
    (_moses_bpe, "subword_nmt", 'pip install "nmt-cli[import]"'),
    (_protobuf, "google", 'pip install "nmt-cli[import]"'),
    (_safetensors, "safetensors", 'pip install "nmt-cli[import]"'),
    *[(_serve, module, "pip install 'nmt-cli[serve]'") for module in ("fastapi", "uvicorn", "py3langid")],
    (_detect, "py3langid", 'pip install "nmt-cli[serve]"'),
    (_moses_de, "sacremoses", "pip install sacremoses"),
    (_ctranslate2, "ctranslate2", "pip install 'nmt-cli[ctranslate2]'"),
    (_hub, "huggingface_hub", 'pip install "nmt-cli[import]"'),
    (_pictures, "matplotlib", "pip install 'nmt-cli[plot]'"),
]
IDS = [f"{site.__name__.strip('_')}-{module}" for site, module, _ in SITES]


def _call(site: Callable[..., None], folder: Path) -> str:
    with pytest.raises(NmtError) as caught:
        site(folder) if site is _safetensors else site()
    assert isinstance(caught.value, InputError)
    return str(caught.value)


@pytest.mark.parametrize(("site", "module", "install"), SITES, ids=IDS)
def test_a_missing_package_is_named_with_its_extra(
    site: Callable[..., None], module: str, install: str, fail_import, tmp_path: Path
) -> None:
    fail_import(module, False)
    message = _call(site, tmp_path)
    assert install in message and "\n" not in message


@pytest.mark.parametrize(("site", "module", "install"), SITES, ids=IDS)
def test_an_installed_package_that_fails_to_import_says_why(
    site: Callable[..., None], module: str, install: str, fail_import, tmp_path: Path
) -> None:
    fail_import(module, True)
    message = _call(site, tmp_path)
    assert BROKEN in message, message  # the real cause, not "needs X: pip install ..."
    assert "is installed but does not import" in message and "pip check" in message
    assert install not in message


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (["import", "hf:Helsinki-NLP/opus-mt-en-de", "-o", "{tmp}/m.pt"], "huggingface_hub"),
        (["translate", "-m", "{tmp}/none.pt", "--format", "html"], "lxml"),
    ],
    ids=["import-hf", "translate-html"],
)
def test_the_command_line_shows_the_import_error(
    argv: list[str], module: str, fail_import, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fail_import(module, True)
    assert nmt(*(a.format(tmp=tmp_path) for a in argv)) == 2
    err = capsys.readouterr().err
    assert f"{module} is installed but does not import: {BROKEN}" in err
    assert "Traceback" not in err and not (tmp_path / "m.pt").exists()


# Each extra's packages as imported, each reached as far as nmt (or its tests) use it: a set of
# versions that resolves but does not work together fails here, not in front of a user.
INTEGRATIONS = {
    "matplotlib": ["matplotlib.figure", "matplotlib.backends.backend_agg"],
    "ctranslate2": ["ctranslate2", "ctranslate2.specs", "ctranslate2.converters"],
    "lxml": ["lxml.html", "lxml.etree"],
    "fastapi": ["fastapi", "starlette.middleware.cors"],
    "uvicorn": ["uvicorn", "uvicorn.protocols.http.h11_impl"],
    "prometheus-client": ["prometheus_client"],
    "python-multipart": ["python_multipart"],
    "py3langid": ["py3langid.langid"],
    "protobuf": ["google.protobuf", "sentencepiece.sentencepiece_model_pb2"],
    "safetensors": ["safetensors.torch"],
    "subword-nmt": ["subword_nmt.apply_bpe"],
    "huggingface-hub": ["huggingface_hub", "huggingface_hub.file_download"],
    "transformers": ["transformers.models.marian"],
    "tensorboard": [
        "tensorboard",
        "torch.utils.tensorboard",
        "tensorboard.backend.event_processing.event_accumulator",
    ],
    "httpx": ["httpx"],
    "libretranslatepy": ["libretranslatepy"],
    "deep-translator": ["deep_translator"],
    "selenium": ["selenium.webdriver"],
    "openapi-core": ["openapi_core", "openapi_core.testing", "openapi_spec_validator"],
    "schemathesis": ["schemathesis", "schemathesis.checks", "requests"],
}
# Tools, run by make lint and make test, not imported by nmt.
NOT_IMPORTED = {"pytest", "pytest-xdist", "build", "ruff", "mypy", "hypothesis", "import-linter"}
ATTRIBUTES = {  # names that packages resolve lazily on first use, where a broken set shows
    "huggingface_hub": ["snapshot_download", "hf_hub_download"],
    "transformers": ["MarianMTModel", "MarianTokenizer"],
}


def _extras() -> set[str]:
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    names = set()
    for requirements in pyproject["project"]["optional-dependencies"].values():
        for requirement in requirements:
            names.add(
                requirement.split(";")[0].split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip()
            )
    return {name.lower().replace("_", "-") for name in names}


def test_every_optional_package_has_an_import_check() -> None:
    assert _extras() - NOT_IMPORTED == set(INTEGRATIONS)


@pytest.mark.parametrize("package", sorted(INTEGRATIONS))
def test_each_optional_integration_imports(package: str) -> None:
    for module in INTEGRATIONS[package]:
        importlib.import_module(module)
    for module, names in ATTRIBUTES.items():
        if package == module.replace("_", "-"):
            imported = importlib.import_module(module)
            for name in names:
                assert callable(getattr(imported, name)), f"{module}.{name}"
