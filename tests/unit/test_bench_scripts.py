"""The benchmark scripts in bench/, which CI does not run (but for gpu_check's dry run): cheap
checks of what smoke runs of them found broken, with their servers and engines stubbed."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from nmt_cli.serving.limits import ServeLimits

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    """Imports a bench/ script as the scripts import each other (bench/ on sys.path)."""
    monkeypatch.syspath_prepend(str(BENCH))

    def load(name: str) -> ModuleType:
        return importlib.import_module(name)

    return load


class FakeServer:
    pid = 0

    def __init__(self) -> None:
        self.stderr = iter(["nmt serve: listening on http://127.0.0.1:8000\n"])

    def send_signal(self, signal: int) -> None:
        pass

    def wait(self, timeout: float | None = None) -> int:
        return 0

    def kill(self) -> None:
        pass


def test_serve_load_lets_every_client_connect(bench, monkeypatch: pytest.MonkeyPatch) -> None:
    """All clients connect from 127.0.0.1: under the server's default bound per address (32), the
    64-client levels and the overload round measured 429 refusals as errors (168 of 200 requests)."""
    serve_load = bench("serve_load")
    commands: list[list[str]] = []

    def popen(command: list[str], **kwargs: object) -> FakeServer:
        commands.append(command)
        return FakeServer()

    monkeypatch.setattr(serve_load.subprocess, "Popen", popen)
    args = argparse.Namespace(precision="fp32", workers=None, max_wait_ms=None)  # as html_tags.py passes
    _, url = serve_load.start_server(Path("model.pt"), args)
    assert url == "http://127.0.0.1:8000"
    command = commands[0]
    bound = int(command[command.index("--max-client-connections") + 1])
    assert bound >= 64 and bound > ServeLimits().max_client_connections


def test_run_all_reads_the_serving_figures_serve_load_reports(
    bench, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """run_all's serving targets name keys that serve_load.py reports (they had kept the names of
    before the client kind entered the keys, so the summary showed "-" for them)."""
    serve_load, run_all = bench("serve_load"), bench("run_all")
    (tmp_path / "test_2016_flickr.en").write_text("a\nb\n", encoding="utf-8")

    def offline(model: Path, lines: list[str], args: argparse.Namespace, result: dict) -> list[str]:
        result.update(serve_direct_p50_ms=10.0, serve_offline_sent_s=100.0, serve_workers=2)
        return ["x"] * len(lines)

    def clients(url: str, lines: list[str], n: int, args: argparse.Namespace):
        return [0.01] * len(lines), [200] * len(lines), [(i, ["x"]) for i in range(len(lines))], 1.0

    class Health:
        def json(self) -> dict:
            return {"batches": 0, "merged_batches": 0}

    monkeypatch.setattr(serve_load, "offline_figures", offline)
    monkeypatch.setattr(serve_load, "start_server", lambda model, args, max_queue=None: (FakeServer(), "u"))
    monkeypatch.setattr(serve_load, "_thread_clients", clients)
    monkeypatch.setattr(serve_load, "_async_clients", clients)
    monkeypatch.setattr(serve_load, "_cpu_seconds", lambda pid: (0.0, 0.0))
    monkeypatch.setattr(serve_load.httpx, "get", lambda url: Health())
    monkeypatch.setattr(serve_load, "emit", lambda result: None)
    argv = ["--data", str(tmp_path), "--model", "m.pt", "--precision", "fp32", "--overload", "0"]
    result = serve_load.main([*argv, "--clients", "1", "16"])
    wanted = [key for key, _, _ in run_all.TARGETS if key.startswith("serve_")]
    assert wanted and all(result.get(key) is not None for key in wanted), wanted


@pytest.mark.skipif(importlib.util.find_spec("fairseq_cli") is not None, reason="fairseq is installed")
def test_constraints_refuses_a_fairseq_folder_without_fairseq(bench, tmp_path: Path) -> None:
    """One line and a non-zero exit at once, not a CalledProcessError after a minute of decoding."""
    constraints = bench("constraints")
    with pytest.raises(SystemExit) as stopped:
        constraints.main(["--fairseq", str(tmp_path), "--model", str(tmp_path / "absent.pt")])
    assert "fairseq" in str(stopped.value.code) and str(tmp_path) in str(stopped.value.code)
