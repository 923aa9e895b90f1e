"""The page at / of `nmt serve`, driven in a real headless Chromium through selenium (Debian's
`chromium` and `chromium-driver`, which .ci/run installs): it lists the served pairs, and a
sentence typed and translated reads back as the Python API translates it with that pair; and a
page of another origin may call LibreTranslate's routes (CORS), but not read /info."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import Pairs, one_thread
from serve_helpers import Server, running_server

from nmt_cli import Translator

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None, reason="needs chromium and chromedriver (see .ci/run)"
)
SENTENCE = "paper tiger silver window"


@pytest.fixture(scope="module")
def server(pairs: Pairs) -> Iterator[Server]:
    with running_server(pairs.en_de, "-m", pairs.de_en, "--workers", 1) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    # No sandbox as root in a container; no background traffic on a machine without internet.
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ):
        options.add_argument(flag)
    with tempfile.TemporaryDirectory() as profile:
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
        try:
            yield driver
        finally:
            driver.quit()


def test_the_page_translates_what_is_typed(server: Server, browser: Any, pairs: Pairs) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = browser
    driver.get(server.url + "/")
    wait = WebDriverWait(driver, 60)
    wait.until(lambda d: len(Select(d.find_element(By.ID, "pair")).options) == 2)
    pair = Select(driver.find_element(By.ID, "pair"))
    assert [o.get_attribute("value") for o in pair.options] == ["en:de", "de:en"]
    assert [o.text for o in pair.options] == ["English \u2192 German", "German \u2192 English"]
    pair.select_by_value("de:en")
    driver.find_element(By.ID, "source").send_keys(SENTENCE)
    driver.find_element(By.ID, "go").click()
    with one_thread():
        expected = Translator.load(pairs.de_en, device="cpu", precision="fp32").translate([SENTENCE])[0]
    target = (By.ID, "target")
    wait.until(expected_conditions.text_to_be_present_in_element(target, expected))
    assert driver.find_element(*target).text == expected
    assert driver.find_element(By.ID, "status").text == ""


def test_page_errors_show_on_the_page(server: Server, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser
    driver.get(server.url + "/")
    WebDriverWait(driver, 60).until(lambda d: d.find_element(By.ID, "pair").text != "")
    driver.find_element(By.ID, "source").send_keys("x" * 3000)
    driver.find_element(By.ID, "go").click()
    status = (By.ID, "status")
    WebDriverWait(driver, 60).until(lambda d: d.find_element(*status).text != "")
    assert "at most 2000" in driver.find_element(*status).text


FETCH = """
const [url, body, done] = arguments;
const init = body ? {method: "POST", headers: {"Content-Type": "application/json"}, body: body} : {};
fetch(url, init).then(r => r.json()).then(j => done(j), e => done("refused: " + e));
"""


def test_a_page_of_another_origin_may_call_translate_but_not_read_info(
    server: Server, browser: Any, pairs: Pairs
) -> None:
    import json

    driver = browser
    # localhost and 127.0.0.1 are two origins to the browser: the page's and the server's.
    driver.get(server.url.replace("127.0.0.1", "localhost") + "/")
    body = json.dumps({"q": SENTENCE, "source": "en", "target": "de"})
    answer = driver.execute_async_script(FETCH, server.url + "/translate", body)
    with one_thread():
        expected = Translator.load(pairs.en_de, device="cpu", precision="fp32").translate([SENTENCE])[0]
    assert answer == {"translatedText": expected}
    info = driver.execute_async_script(FETCH, server.url + "/info", None)
    assert isinstance(info, str) and info.startswith("refused: ")
