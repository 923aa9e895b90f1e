"""`nmt serve --shortlist`: requests decode over the model's shortlist by default, and a request
may turn it off."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import Corpus
from serve_helpers import serving_in_process

from nmt_cli import Translator


def test_serve_decodes_over_the_shortlist_by_default_and_per_request(listed: Path, corpus: Corpus) -> None:
    pytest.importorskip("fastapi")
    lines = corpus.test_src[:20]
    offline = Translator.load(listed, device="cpu", precision="fp32")
    with serving_in_process(listed, "--shortlist") as server:
        info = server.get("/info").json()
        assert info["shortlist"] == {"candidates": 3, "frequent": 0}
        assert info["decode"]["shortlist"] is True
        listed_out = server.post({"text": lines}).json()["translations"]
        full_out = server.post({"text": lines, "shortlist": False}).json()["translations"]
        bad = server.post({"text": lines, "shortlist": "yes"})
    assert listed_out == offline.translate(lines, shortlist=True)
    assert full_out == offline.translate(lines)
    assert bad.status_code == 422 and "shortlist" in bad.json()["error"]
