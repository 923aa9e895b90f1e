"""What a checkpoint file that cannot be loaded is, in words its user can act on: damaged (a
tensor's checksum), cut short, written by another torch, or not nmt's at all."""

from __future__ import annotations

import zipfile
from pathlib import Path

import torch

from nmt_cli.errors import InputError

NOT_OURS = "; give a .pt file written by `nmt train` or `nmt average`"


class DamagedCheckpoint(InputError):
    """A checkpoint file cut short or whose bytes changed: another file of the run may serve."""


def unreadable(path: Path, err: Exception, members: list[str] | None) -> InputError:
    """What torch.load failing to read `path` means to the user. torch's own words for a file cut
    short are a paragraph of its zip reader's internals ("failed finding central directory. This
    is an internal miniz error..."), of no use to someone who only needs another file."""
    if isinstance(err, OSError) and err.filename is not None:  # refused by the system when opened
        hint = "check its permissions" if isinstance(err, PermissionError) else "check the file and its disk"
        return InputError(f"checkpoint {path}: cannot read it ({err.strerror}); {hint}")
    if members is not None and any(name.endswith("/data.pkl") for name in members):
        # Whole, and laid out as torch.save lays it out: written by another version of torch?
        return InputError(
            f"checkpoint {path}: this torch ({torch.__version__}) cannot read it: {_first_line(err)}; "
            "load it with the torch that wrote it"
        )
    if members is not None:  # every member whole, yet not torch's layout (an .npz, a .zip)
        return InputError(
            f"checkpoint {path}: not an nmt checkpoint (a zip archive torch did not write){NOT_OURS}"
        )
    return DamagedCheckpoint(
        f"checkpoint {path}: not a complete checkpoint (the file is cut short or damaged); use another "
        "one, e.g. an earlier checkpoint_N.pt of the run"
    )


def _first_line(err: Exception) -> str:
    """torch's reason without its C++ location ("[enforce fail at inline_container.cc:230] . "):
    its first sentence."""
    text = str(err).strip().split("] . ", 1)[-1]
    return text.split(". ", 1)[0].splitlines()[0][:300] if text else type(err).__name__


def check_integrity(path: Path) -> list[str] | None:
    """torch.save writes a zip archive with a CRC-32 for every tensor's bytes, which torch.load
    does not check: a damaged tensor would load and decode garbage. zipfile checks them all (its
    speed: docs/benchmarks.md). The members of `path` when it is a whole zip archive; one that is
    not (None) is left to torch.load to describe."""
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
            members = archive.namelist()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return None
    if damaged is not None:
        raise DamagedCheckpoint(
            f"checkpoint {path}: damaged: {damaged.split('/', 1)[-1]} does not match its checksum; use "
            "another one, e.g. an earlier checkpoint_N.pt of the run"
        )
    return members
