"""nmt: the Transformer of "Attention Is All You Need" as a command-line toolkit.

The command line (`cli/`) parses options into typed objects (`config`) and calls one plain `run`
per command (`commands/`). Under it: the model (`model/`, no I/O), data preparation and batching
(`data/`), training (`training/`), decoding (`decoding/`: its rules, search, sampling, the
`Translator`) and the HTTP service over decoding (`serving/`). The import rules between them are
import-linter contracts in pyproject.toml.

`from nmt_cli import Translator` is the Python API (see `nmt_cli.decoding.translator`), with
`Sampling` for sampled translations; they are imported on first use so that the command line
starts without loading torch for commands that do not need it.
"""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Sampling", "Translator", "__version__"]

if TYPE_CHECKING:
    from nmt_cli.decoding.settings import Sampling
    from nmt_cli.decoding.translator import Translator


def __getattr__(name: str) -> Any:
    if name == "Translator":
        from nmt_cli.decoding.translator import Translator

        return Translator
    if name == "Sampling":
        from nmt_cli.decoding.settings import Sampling

        return Sampling
    raise AttributeError(f"module 'nmt_cli' has no attribute {name!r}")
