"""The page that `nmt serve` shows at /: a text box, the language pairs from GET /languages, and
the translation from POST /translate (LibreTranslate's shape). One self-contained document: no
build step, no assets from elsewhere, so it works on a machine without internet."""

import json

from nmt_cli.serving.libretranslate import NAMES

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>nmt</title>
<style>
  body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; }
  .pair, .key { margin-bottom: 0.75rem; }
  .boxes { display: flex; gap: 1rem; }
  textarea, output { flex: 1; min-height: 10rem; padding: 0.5rem; font: inherit; }
  output { border: 1px solid #ccc; white-space: pre-wrap; background: #f7f7f7; }
  #status { color: #a00; min-height: 1.5em; }
</style>
</head>
<body>
<h1>nmt</h1>
<div class="pair">
  <label for="pair">Languages</label>
  <select id="pair"></select>
  <button id="go" type="button">Translate</button>
</div>
<div class="key">
  <label for="key">API key (if the server needs one)</label> <input id="key" type="password">
</div>
<div class="boxes">
  <textarea id="source" aria-label="Text to translate" placeholder="Type or paste text"></textarea>
  <output id="target" aria-label="Translation" aria-live="polite"></output>
</div>
<p id="status"></p>
<script>
"use strict";
const pair = document.getElementById("pair");
const status = document.getElementById("status");
// Both sides of a pair by name: a target that is no served source is not named by /languages.
const NAMES = LANGUAGE_NAMES;

async function loadPairs() {
  const response = await fetch("/languages");
  const languages = await response.json();
  for (const language of languages) {
    for (const target of language.targets) {
      const option = document.createElement("option");
      option.value = language.code + ":" + target;
      option.textContent = language.name + " \\u2192 " + (NAMES[target] || target);
      pair.appendChild(option);
    }
  }
  if (!pair.options.length) {
    const option = document.createElement("option");
    option.value = "auto:auto";
    option.textContent = "the served model";
    pair.appendChild(option);
  }
}

async function translate() {
  const [source, target] = pair.value.split(":");
  const lines = document.getElementById("source").value.split("\\n");
  const body = {q: lines, source: source, target: target, format: "text"};
  const key = document.getElementById("key").value;
  if (key) body.api_key = key;
  status.textContent = "";
  document.getElementById("go").disabled = true;
  try {
    const response = await fetch("/translate", {
      method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify(body),
    });
    const answer = await response.json();
    if (!response.ok) {
      status.textContent = answer.error || ("HTTP " + response.status);
      return;
    }
    document.getElementById("target").textContent = answer.translatedText.join("\\n");
  } catch (err) {
    status.textContent = "The server did not answer: " + err;
  } finally {
    document.getElementById("go").disabled = false;
  }
}

document.getElementById("go").addEventListener("click", translate);
loadPairs().catch((err) => { status.textContent = "Could not list the languages: " + err; });
</script>
</body>
</html>
"""


def html() -> str:
    return PAGE.replace("LANGUAGE_NAMES", json.dumps(NAMES, sort_keys=True))
