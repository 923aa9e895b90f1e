"""Pictures with matplotlib (an optional extra): a figure without pyplot or a display, and an
atomic save in the format the file name asks for. Shared by `nmt plot` and `nmt attend`.
matplotlib is imported only inside the functions, so that the toolkit runs without it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nmt_cli.errors import InputError, optional_import_failure
from nmt_cli.files import output_file, write_failure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

EXTRA = "pip install 'nmt-cli[plot]'"
FORMATS = (".png", ".svg")
DPI = 100


def require_matplotlib() -> None:
    """Fail with one line naming the extra when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        missing = f"pictures need matplotlib, an optional extra: {EXTRA}"
        raise optional_import_failure(err, missing, "matplotlib") from None


def new_figure(width: float, height: float) -> Figure:
    """A figure on the Agg canvas (no pyplot, no display), laid out by matplotlib's constrained layout."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def check_picture_path(path: Path) -> str:
    """The format of a picture file from its extension: 'png' or 'svg'."""
    if path.suffix.lower() not in FORMATS:
        raise InputError(f"{path}: cannot tell the picture format; end the name in .png or .svg")
    return path.suffix.lower()[1:]


def save_figure(figure: Figure, path: Path, name: str = "--output") -> None:
    """Write in the format of the extension, atomically (`files.output_file`; `name` is the option
    that named the file, for errors)."""
    fmt = check_picture_path(path)
    try:
        with output_file(path, name, binary=True) as stream:
            figure.savefig(stream, format=fmt)
    except OSError as err:  # exit 2 where the place is at fault (permissions), 1 for a full disk
        raise write_failure(err, f"{name} {path}", name) from None
