"""Running out of memory is one line and exit 1, whichever allocator says so: Python's MemoryError,
torch's CPU allocator (a plain RuntimeError) or its GPU allocator (torch.OutOfMemoryError); a stop
that a library wrapped in an error of its own is a stop, not an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import Corpus, nmt, one_line_error, train_args

from nmt_cli.errors import Terminated, describe

SAID = "out of memory; use smaller batches (--batch-tokens, train.max_tokens) or a smaller model"


@pytest.mark.parametrize(
    "error",
    [
        MemoryError(),
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: 8 bytes"
        ),
    ],
    ids=["python", "gpu", "cpu"],
)
def test_each_allocator_s_failure_is_out_of_memory(error: BaseException) -> None:
    assert describe(error) == (SAID, 1)


def wrapped(stop: BaseException) -> RuntimeError:
    """As Python's class creation wraps an exception raised in __set_name__ during an import."""
    try:
        try:
            raise stop
        except BaseException as err:
            raise RuntimeError("Error calling __set_name__ on '_Field' instance 'x' in 'Spec'") from err
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize(
    ("stop", "said"),
    [(KeyboardInterrupt(), ("interrupted", 130)), (Terminated(), ("terminated by SIGTERM", 143))],
)
def test_a_stop_wrapped_by_a_library_is_a_stop(stop: BaseException, said: tuple[str, int]) -> None:
    assert describe(wrapped(stop)) == said
    chained = ImportError("initialization failed")  # pybind11's wrapping: the stop as its context
    chained.__context__ = stop
    assert describe(chained) == said


def test_other_runtime_errors_stay_internal_errors() -> None:
    message, code = describe(RuntimeError("NCCL error: Cuda failure 'out of memory'")) or ("", 0)
    assert message.startswith("internal error: RuntimeError") and code == 1


def test_a_recipe_whose_model_does_not_fit_in_memory_is_one_line(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 10**12 x 32 fp32 weights: petabytes, refused by the allocator at once.
    args = train_args(corpus.data, tmp_path / "run", "model.d_ff=1000000000000")
    capsys.readouterr()
    assert nmt(*args) == 1
    assert one_line_error(capsys) == f"nmt: error: {SAID}"
