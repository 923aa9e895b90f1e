"""Which of the served source languages a text is written in, for LibreTranslate's POST /detect
and `"source": "auto"`: py3langid (langid.py's Naive Bayes model over byte n-grams, 97
languages), asked to choose among the server's source languages only.

Its model takes about 0.6 s to load: that happens at the first text to identify, not at start.
"""

from __future__ import annotations

import threading
from typing import Any

from nmt_cli.errors import optional_import_failure


class Detector:
    """Ranks `languages` (ISO 639-1 codes) by how likely a text is in each."""

    def __init__(self, languages: list[str]) -> None:
        self.languages = sorted(set(languages))
        self._identifier: Any = None
        self._lock = threading.Lock()

    def _loaded(self) -> Any:
        with self._lock:
            if self._identifier is None:
                try:
                    from py3langid.langid import MODEL_FILE, LanguageIdentifier
                except ImportError as err:
                    message = 'language identification needs py3langid: pip install "nmt-cli[serve]"'
                    raise optional_import_failure(err, message, "py3langid") from None
                identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
                known = [code for code in self.languages if code in identifier.nb_classes]
                if known:
                    identifier.set_languages(known)
                self._identifier = (identifier, known)
            return self._identifier

    def rank(self, text: str) -> list[tuple[str, float]]:
        """(language, confidence in percent) for the served languages, the likeliest first. A
        language the identifier does not know comes last with confidence 0; with one served
        language, or a text with no letters, the ranking is the served order at equal odds."""
        identifier, known = self._loaded()
        unknown = [(code, 0.0) for code in self.languages if code not in known]
        if len(known) < 2 or not any(ch.isalpha() for ch in text):
            pool = known or self.languages
            share = round(100.0 / len(pool), 2) if pool else 0.0
            return [(code, share) for code in pool] + (unknown if known else [])
        ranked = [(code, round(100.0 * float(p), 2)) for code, p in identifier.rank(text)]
        return ranked + unknown
