"""The explanation page (/ui) driven in headless Chromium against the real service.

One `python -m service` on the shipped `model_repository/` (the session's, tests.bundles) and one
Chromium for the module.
For each task the form is filled with the keyboard (selenium send_keys), submitted, and the
rendered DOM is checked against the API's own answer to the same input (httpx): the label,
the scores, the heat map's size (kept row tokens x kept column tokens), one evidence block per
evidence sentence with its share, unknown and truncated tokens marked, an API error shown in
the alert region. A pass at phone size checks that only the heat map scrolls sideways.

Needs Debian's `chromium` and `chromium-driver` (`sudo bash tests/browser-ci-deps.sh`);
without them the module skips, except under CI (`CI` set), where it fails.

Screenshots go to tmp; with ATTSERVE_UPDATE_SCREENSHOTS=1 they go to docs/ui-*.png (the
ones docs/ui.md shows), each checked to stay under 300 KB.
"""

from __future__ import annotations

import base64
import fnmatch
import io
import os
import re
import shutil
import tomllib
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]

UI_DIR = REPO / "service" / "static" / "ui"
INSTALL_HINT = "install them with `sudo bash tests/browser-ci-deps.sh` (Debian: chromium, chromium-driver)"
UPDATE_SCREENSHOTS = os.environ.get("ATTSERVE_UPDATE_SCREENSHOTS") == "1"
SCREENSHOT_LIMIT = 300 * 1024
UNKNOWN_WORD = "zqxwvy"
DESKTOP = (1280, 900)
PHONE = (390, 844)

try:
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service as ChromeService
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # the [dev] extra not installed
    webdriver = None


def fmt(x: float) -> str:
    """The page's number format (ui.js fmt)."""
    return f"{x:.3f}"


# --- fixtures --------------------------------------------------------------------------------

def _missing_browser() -> str | None:
    if webdriver is None:
        return "selenium (a [dev] dependency) is not installed"
    missing = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    if missing:
        return f"{' and '.join(missing)} not found; {INSTALL_HINT}"
    return None


@pytest.fixture(scope="module")
def browser_tools() -> None:
    reason = _missing_browser()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI installs the browser test's tools, but {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def server(shipped_models_server):
    """The session's server of the shipped bundles (tests.bundles)."""
    return shipped_models_server


@pytest.fixture(scope="module")
def driver(browser_tools, server):
    options = Options()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--lang=en-US",
                "--force-device-scale-factor=1", f"--window-size={DESKTOP[0]},{DESKTOP[1]}"):
        options.add_argument(arg)
    if os.geteuid() == 0:  # Chromium refuses to run as root with its sandbox
        options.add_argument("--no-sandbox")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = ChromeService(executable_path=shutil.which("chromedriver"))
    try:
        chrome = webdriver.Chrome(service=service, options=options)
    except WebDriverException as exc:
        pytest.fail(f"headless Chromium did not start: {exc.msg}")
    chrome.set_page_load_timeout(30)
    try:
        yield chrome
    finally:
        chrome.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return REPO / "docs" if UPDATE_SCREENSHOTS else tmp_path_factory.mktemp("ui-screenshots")


# --- helpers ---------------------------------------------------------------------------------

def api(server, path: str, body: dict) -> dict:
    response = httpx.post(server.base + path, json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def open_page(driver, server, task: str) -> None:
    driver.get(server.base + "/ui")  # the redirect to /ui/ included
    wait = WebDriverWait(driver, 15)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#model option[value]:not([value=''])"))
    radio = driver.find_element(By.CSS_SELECTOR, f'input[name="task"][value="{task}"]')
    radio.send_keys(Keys.SPACE)  # focus + space: what a keyboard user does
    assert radio.is_selected()
    wait.until(lambda d: d.find_element(By.ID, "model").get_attribute("value")
               in [m for m in d.execute_script("return [...document.querySelectorAll('#model option')].map(o => o.value)")])


def choose_model(driver, name: str) -> None:
    Select(driver.find_element(By.ID, "model")).select_by_value(name)


def type_into(driver, field: str, text: str) -> None:
    box = driver.find_element(By.ID, field)
    box.clear()
    box.send_keys(text)


def submit(driver, how: str = "ctrl-enter", field: str | None = None) -> None:
    """Submit and wait for the page to show the answer (or the alert)."""
    driver.execute_script("document.getElementById('status').textContent = '';"
                          "document.getElementById('alert').hidden = true;")
    if how == "ctrl-enter":
        driver.find_element(By.ID, field).send_keys(Keys.CONTROL, Keys.ENTER)
    else:  # the button, by the keyboard
        driver.find_element(By.ID, "submit").send_keys(Keys.ENTER)
    WebDriverWait(driver, 20).until(
        lambda d: d.find_element(By.ID, "status").text.startswith("Done")
        or d.find_element(By.ID, "alert").is_displayed())


def shown_label(driver) -> str:
    assert driver.find_element(By.ID, "result").is_displayed()
    assert not driver.find_element(By.ID, "alert").is_displayed(), driver.find_element(By.ID, "alert").text
    return driver.find_element(By.ID, "result-label").text


def check_scores(driver, answer: dict) -> None:
    rows = driver.find_elements(By.CSS_SELECTOR, "#scores li")
    assert [r.get_attribute("data-label") for r in rows] == list(answer["scores"])
    assert [r.find_element(By.CLASS_NAME, "score-value").text for r in rows] == [fmt(v) for v in answer["scores"].values()]


def tokens_in(scope, field: str):
    return scope.find_elements(By.CSS_SELECTOR, f'.text-block[data-field="{field}"] .tok')


def check_tokens(spans, tokens: list[dict], cut: int = 0) -> None:
    """The DOM's token spans are the API's tokens (the ones the model read), unknown ones
    marked, then one struck-through span for the text of the `cut` tokens past the max length."""
    read = [s for s in spans if s.get_attribute("data-truncated") == "false"]
    assert len(read) == len(tokens)
    for span, token in zip(read, tokens):
        assert span.get_attribute("data-unknown") == str(token["unknown"]).lower()
        classes = span.get_attribute("class").split()
        assert ("unknown" in classes) == token["unknown"] and "truncated" not in classes
    rest = spans[len(read):]
    assert [s.get_attribute("data-cut") for s in rest] == ([str(cut)] if cut else [])
    assert all("truncated" in s.get_attribute("class").split() for s in rest)


def check_heatmap(figure, alignment: dict, tokens: dict[str, list], row_field: str, col_field: str) -> None:
    rows, cols = len(tokens[row_field]), len(tokens[col_field])
    assert (len(alignment["weights"]), len(alignment["weights"][0])) == (rows, cols)
    cells = figure.find_elements(By.CSS_SELECTOR, "td.hm-cell")
    assert len(cells) == rows * cols
    assert len(figure.find_elements(By.CSS_SELECTOR, "th.hm-row")) == rows
    assert len(figure.find_elements(By.CSS_SELECTOR, "th.hm-col")) == cols
    label = cells[0].get_attribute("aria-label")
    assert re.fullmatch(r".+ → .+: \d\.\d\d", label), label
    assert label.endswith(f": {alignment['weights'][0][0]:.2f}")
    assert cells[0].get_attribute("title") == label


def console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def screenshot(driver, shots: Path, name: str) -> Path:
    """The whole page (beyond the viewport) as PNG; under 300 KB when it is for docs/."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 2400), "scale": 1}
    data = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                             "clip": clip})["data"]
    path = shots / name
    png = base64.b64decode(data)
    try:  # a 256-colour palette: a third of the size, the same look for flat UI colours
        from PIL import Image  # pillow, through matplotlib in the [dev] extra

        with Image.open(io.BytesIO(png)) as image:
            out = io.BytesIO()
            image.convert("RGB").quantize(colors=256).save(out, format="PNG", optimize=True)
            png = out.getvalue()
    except ImportError:
        pass
    path.write_bytes(png)
    if UPDATE_SCREENSHOTS:
        assert path.stat().st_size < SCREENSHOT_LIMIT, f"{path}: {path.stat().st_size} bytes"
    return path


# --- the files and their headers (no browser) -------------------------------------------------

def test_page_files_and_headers(server) -> None:
    from service.http.ui import CONTENT_SECURITY_POLICY

    client = httpx.Client(base_url=server.base, timeout=10)
    redirect = client.get("/ui")
    assert redirect.status_code == 307 and redirect.headers["location"] == "ui/"
    assert client.head("/ui").status_code == 307
    for path, media in (("/ui/", "text/html"), ("/ui/index.html", "text/html"),
                        ("/ui/ui.js", "text/javascript"), ("/ui/ui.css", "text/css")):
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"].startswith(media), (path, response.headers["content-type"])
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["x-content-type-options"] == "nosniff"
    for directive in ("default-src 'self'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:",
                      "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'"):
        assert directive in CONTENT_SECURITY_POLICY
    assert client.get("/ui/").text == (UI_DIR / "index.html").read_text()
    missing = client.get("/ui/nothing.js")
    assert missing.status_code == 404 and missing.json()["error"]["code"]

    html = (UI_DIR / "index.html").read_text()
    # the CSP allows no inline code: no inline script or style, no handler or style attribute
    assert re.findall(r"<script\b[^>]*>", html) == ['<script src="ui.js" defer>']
    assert "<style" not in html and not re.search(r"\sstyle=", html) and not re.search(r"\son\w+=", html)
    assert not re.search(r"(src|href)=\"(https?:)?//", html), "nothing from another origin"
    assert set(p.name for p in UI_DIR.iterdir()) == {"index.html", "ui.js", "ui.css"}


def test_static_files_ship_in_the_package() -> None:
    """The images `pip install .` (not editable): the page must be package data."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["service"]
    for path in UI_DIR.iterdir():
        relative = path.relative_to(REPO / "service").as_posix()
        assert any(fnmatch.fnmatch(relative, p) for p in patterns), relative


# --- the page in the browser ------------------------------------------------------------------

def test_classify(driver, server, shots) -> None:
    text = f"Shares in the bank fell sharply after {UNKNOWN_WORD} reported a loss for the quarter."
    open_page(driver, server, "classification")
    model = driver.find_element(By.ID, "model").get_attribute("value")
    answer = api(server, "/classify", {"text": text, "model": model, "explain": True})
    type_into(driver, "text", text)
    submit(driver, "ctrl-enter", "text")

    assert shown_label(driver) == answer["label"]
    check_scores(driver, answer)
    explanation = answer["explanation"]
    tokens = explanation["tokens"]["text"]
    spans = tokens_in(driver, "text")
    check_tokens(spans, tokens)
    unknown = [s for s in spans if s.get_attribute("data-unknown") == "true"]
    assert [s.text for s in unknown] == [UNKNOWN_WORD]
    assert "unknown word" in unknown[0].get_attribute("title")
    assert "dotted" in unknown[0].value_of_css_property("text-decoration-style")
    if "token_weights" in explanation:
        weighted = driver.find_elements(By.CSS_SELECTOR, ".tok.weighted")
        assert len(weighted) == len(explanation["token_weights"]) == len(tokens)
        assert [float(s.get_attribute("data-weight")) for s in weighted] == pytest.approx(explanation["token_weights"])
    elif "alignment" in explanation:  # an AttConv classifier: text x text
        check_heatmap(driver.find_element(By.CSS_SELECTOR, "figure.heatmap"), explanation["alignment"],
                      explanation["tokens"], "text", "text")
    assert driver.find_element(By.ID, "method").text == explanation["method"]
    screenshot(driver, shots, "ui-classify.png")
    assert console_errors(driver) == []


def test_truncated_tokens_are_marked(driver, server) -> None:
    models = httpx.get(server.base + "/v1/models").json()["models"]
    model = min((m for m in models if m["task"] == "classification"), key=lambda m: m["max_lengths"]["input_ids"])
    limit = model["max_lengths"]["input_ids"]
    text = " ".join(["the service answered quickly and well"] * (limit // 6 + 4))  # past the limit
    open_page(driver, server, "classification")
    choose_model(driver, model["name"])
    answer = api(server, "/classify", {"text": text, "model": model["name"], "explain": True})
    assert answer["truncated"]
    box = driver.find_element(By.ID, "text")
    box.clear()
    box.send_keys(text)
    submit(driver, "button")

    assert shown_label(driver) == answer["label"]
    tokens = answer["explanation"]["tokens"]["text"]
    cut_count = answer["explanation"]["cut_tokens"]["text"]
    assert len(tokens) == limit and cut_count > 0
    spans = tokens_in(driver, "text")
    check_tokens(spans, tokens, cut_count)
    cut = [s for s in spans if s.get_attribute("data-truncated") == "true"]
    assert len(cut) == 1 and text.endswith(cut[0].text)
    assert "line-through" in cut[0].value_of_css_property("text-decoration-line")
    assert "cut: beyond the model's max length" in cut[0].get_attribute("title")
    note = driver.find_element(By.CSS_SELECTOR, ".cut-note")
    assert note.is_displayed() and "cut: beyond the model's max length" in note.text
    assert "cut to the model's max length" in driver.find_element(By.ID, "result-meta").text
    assert console_errors(driver) == []


def test_entailment_every_model(driver, server, shots) -> None:
    premise = f"A man is playing a {UNKNOWN_WORD} guitar on stage in front of a large crowd."
    hypothesis = "A man is performing music."
    open_page(driver, server, "entailment")
    catalog = httpx.get(server.base + "/v1/models").json()
    default = catalog["tasks"]["entailment"]["default"]
    names = sorted(catalog["tasks"]["entailment"]["models"], key=lambda n: n == default)  # default last: its screenshot
    type_into(driver, "premise", premise)
    type_into(driver, "hypothesis", hypothesis)
    for name in names:
        choose_model(driver, name)
        answer = api(server, "/entailment", {"premise": premise, "hypothesis": hypothesis, "model": name, "explain": True})
        submit(driver, "ctrl-enter", "hypothesis")
        assert shown_label(driver) == answer["label"], name
        assert name in driver.find_element(By.ID, "result-meta").text
        check_scores(driver, answer)
        explanation = answer["explanation"]
        tokens = explanation["tokens"]
        check_tokens(tokens_in(driver, "premise"), tokens["premise"])
        check_tokens(tokens_in(driver, "hypothesis"), tokens["hypothesis"])
        assert [s.text for s in tokens_in(driver, "premise") if s.get_attribute("data-unknown") == "true"] == [UNKNOWN_WORD]
        figures = driver.find_elements(By.CSS_SELECTOR, "figure.heatmap")
        alignment = explanation.get("alignment")
        if alignment is None:
            assert figures == []
            assert "exposes no attention weights" in driver.find_element(By.CSS_SELECTOR, ".no-attention").text
            continue
        assert (alignment["rows"], alignment["columns"]) == ("hypothesis", "premise")
        assert len(figures) == 1
        check_heatmap(figures[0], alignment, tokens, "hypothesis", "premise")

    # the grid by the keyboard: arrow keys move the focus from cell to cell
    first = driver.find_element(By.CSS_SELECTOR, "td.hm-cell[data-row='0'][data-col='0']")
    assert first.get_attribute("tabindex") == "0"
    driver.execute_script("arguments[0].focus()", first)
    first.send_keys(Keys.ARROW_RIGHT)
    active = driver.switch_to.active_element
    assert (active.get_attribute("data-row"), active.get_attribute("data-col")) == ("0", "1")
    active.send_keys(Keys.ARROW_DOWN)
    assert driver.switch_to.active_element.get_attribute("data-row") == "1"
    assert driver.find_element(By.CSS_SELECTOR, ".readout").text == driver.switch_to.active_element.get_attribute("aria-label")
    screenshot(driver, shots, "ui-entailment.png")
    assert console_errors(driver) == []


def test_verify(driver, server, shots) -> None:
    claim = "A dog is running in the snow."
    evidence = ["Two people sit at a cafe table.", f"A brown dog runs through deep {UNKNOWN_WORD} snow.",
                "A child paints a fence."]
    open_page(driver, server, "verification")
    model = driver.find_element(By.ID, "model").get_attribute("value")
    answer = api(server, "/verify", {"claim": claim, "evidence": evidence, "model": model, "explain": True})
    type_into(driver, "claim", claim)
    type_into(driver, "evidence", "\n".join(evidence) + "\n\n")  # Enter between sentences; empty lines dropped
    submit(driver, "ctrl-enter", "evidence")

    assert shown_label(driver) == answer["label"]
    check_scores(driver, answer)
    explanation = answer["explanation"]
    tokens = explanation["tokens"]
    check_tokens(tokens_in(driver, "claim"), tokens["claim"])
    blocks = driver.find_elements(By.CSS_SELECTOR, ".evidence-block")
    assert len(blocks) == len(evidence) == len(explanation["evidence"]) == len(tokens["evidence"])
    for i, (block, given, share) in enumerate(zip(blocks, explanation["evidence"], answer["evidence_scores"])):
        assert given["share"] == pytest.approx(share, abs=1e-6)
        assert block.find_element(By.CLASS_NAME, "share-value").text == fmt(given["share"])
        assert float(block.get_attribute("data-share")) == pytest.approx(given["share"])
        spans = block.find_elements(By.CSS_SELECTOR, ".tok")
        check_tokens(spans, tokens["evidence"][i])
        # each kept evidence token shaded by the claim's attention: its column's max
        weights = given["alignment"]["weights"]
        column_max = [max(row[j] for row in weights) for j in range(len(weights[0]))]
        weighted = block.find_elements(By.CSS_SELECTOR, ".tok.weighted")
        assert [float(s.get_attribute("data-weight")) for s in weighted] == pytest.approx(column_max)
        assert (given["alignment"]["rows"], given["alignment"]["columns"]) == ("claim", "evidence")
        check_heatmap(block.find_element(By.CSS_SELECTOR, "figure.heatmap"), given["alignment"],
                      {"claim": tokens["claim"], "evidence": tokens["evidence"][i]}, "claim", "evidence")
    assert [s.text for s in blocks[1].find_elements(By.CSS_SELECTOR, ".tok.unknown")] == [UNKNOWN_WORD]
    # open the heat map of the evidence with the largest share, by the keyboard
    top = max(range(len(evidence)), key=lambda i: answer["evidence_scores"][i])
    blocks[top].find_element(By.TAG_NAME, "summary").send_keys(Keys.ENTER)
    assert blocks[top].find_element(By.CSS_SELECTOR, "figure.heatmap").is_displayed()
    screenshot(driver, shots, "ui-verify.png")
    assert console_errors(driver) == []


def test_rerank(driver, server, shots) -> None:
    """The reranker's page: the texts best first, each with the API's own score, and a note in
    place of an explanation (rerank answers none)."""
    query = "how are glacier caves formed?"
    texts = ["The ice facade is approximately 60 m high.",
             "A glacier cave is a cave formed within the ice of a glacier.",
             "Ice formations may form on the floor of a cave."]
    open_page(driver, server, "rerank")
    model = driver.find_element(By.ID, "model").get_attribute("value")
    answer = api(server, "/rerank", {"query": query, "texts": texts, "model": model, "return_text": True})
    type_into(driver, "query", query)
    type_into(driver, "texts", "\n".join(texts) + "\n\n")  # empty lines dropped, as for evidence
    submit(driver, "ctrl-enter", "texts")

    assert shown_label(driver) == f"text {answer[0]['index'] + 1}"
    rows = driver.find_elements(By.CSS_SELECTOR, "#scores li")
    assert [int(r.get_attribute("data-index")) for r in rows] == [a["index"] for a in answer]
    assert [r.find_element(By.CLASS_NAME, "score-value").text for r in rows] == [fmt(a["score"]) for a in answer]
    assert [r.find_element(By.CLASS_NAME, "score-name").text for r in rows] == [
        f"{a['index'] + 1}. {texts[a['index']]}" for a in answer]
    assert "top" in rows[0].get_attribute("class")
    assert "no attention weights" in driver.find_element(By.ID, "explanation").text
    assert driver.find_element(By.CSS_SELECTOR, "#result .verdict-key").text == "Best"
    assert driver.find_element(By.ID, "submit").text == "Rank"
    assert "Labels" not in driver.find_element(By.ID, "model-info").text  # a reranker has none
    screenshot(driver, shots, "ui-rerank.png")
    assert console_errors(driver) == []


def test_zero_shot(driver, server) -> None:
    """Zero-shot (service.http.zero_shot): the entailment models in the picker, the labels best first
    with the API's own scores."""
    text = "Shares in the bank fell sharply after it reported a loss for the quarter."
    labels = ["sport", "business", "politics"]
    open_page(driver, server, "zero_shot")
    model = driver.find_element(By.ID, "model").get_attribute("value")
    options = [o.get_attribute("value") for o in driver.find_elements(By.CSS_SELECTOR, "#model option")]
    entailment = [m["name"] for m in httpx.get(server.base + "/v1/models", timeout=10).json()["models"]
                  if m.get("task") == "entailment"]
    assert sorted(options) == sorted(entailment) and model in entailment
    answer = api(server, "/zero-shot", {"text": text, "candidate_labels": labels, "model": model})
    type_into(driver, "zs-text", text)
    type_into(driver, "candidate-labels", "\n".join(labels) + "\n\n")
    submit(driver, "ctrl-enter", "candidate-labels")

    assert shown_label(driver) == answer["labels"][0]
    rows = driver.find_elements(By.CSS_SELECTOR, "#scores li")
    assert [r.find_element(By.CLASS_NAME, "score-name").text for r in rows] == answer["labels"]
    assert [r.find_element(By.CLASS_NAME, "score-value").text for r in rows] == [fmt(s) for s in answer["scores"]]
    assert driver.find_element(By.ID, "submit").text == "Rank"
    assert console_errors(driver) == []


def test_api_error_in_the_alert(driver, server) -> None:
    open_page(driver, server, "classification")
    expected = httpx.post(server.base + "/classify", json={"text": "", "explain": True}, timeout=10)
    assert expected.status_code == 422
    message = expected.json()["error"]["message"]
    driver.find_element(By.ID, "text").clear()
    submit(driver, "button")
    alert = driver.find_element(By.ID, "alert")
    assert alert.is_displayed() and alert.get_attribute("role") == "alert"
    assert message in alert.text and "422" in alert.text
    assert not driver.find_element(By.ID, "result").is_displayed()
    # the next good answer clears it
    type_into(driver, "text", "Shares fell sharply.")
    submit(driver, "ctrl-enter", "text")
    assert not driver.find_element(By.ID, "alert").is_displayed()
    assert driver.find_element(By.ID, "result-label").text
    # 422 is logged by Chromium as a failed resource load; nothing else may be
    assert [m for m in console_errors(driver) if "422" not in m] == []


def test_phone_size(driver, server, shots) -> None:
    """390 x 844, a phone's viewport: the page does not scroll sideways, the heat map does,
    inside its own container."""
    premise = ("A man in a red jacket is playing an old acoustic guitar on a small wooden stage "
               "while a large crowd of people listens and claps along in the warm evening air.")
    hypothesis = "A musician is performing for an audience outdoors."
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 1, "mobile": True})
    try:
        open_page(driver, server, "entailment")
        answer = api(server, "/entailment", {"premise": premise, "hypothesis": hypothesis, "explain": True})
        type_into(driver, "premise", premise)
        type_into(driver, "hypothesis", hypothesis)
        submit(driver, "ctrl-enter", "hypothesis")
        assert shown_label(driver) == answer["label"]
        width = driver.execute_script("return window.innerWidth")
        assert width == PHONE[0]
        assert driver.execute_script("return document.documentElement.scrollWidth") <= width
        scroller = driver.find_element(By.CSS_SELECTOR, ".hm-scroll")
        assert driver.execute_script("return arguments[0].scrollWidth > arguments[0].clientWidth", scroller)
        assert scroller.value_of_css_property("overflow-x") == "auto"
        check_heatmap(driver.find_element(By.CSS_SELECTOR, "figure.heatmap"), answer["explanation"]["alignment"],
                      answer["explanation"]["tokens"], "hypothesis", "premise")
        screenshot(driver, shots, "ui-phone.png")
        assert console_errors(driver) == []
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_other_explanation_shapes(driver, server) -> None:
    """The shapes the shipped models do not produce, from a real answer reshaped and handed to
    the page in place of the service's (window.fetch replaced in the page): a model with no
    attention (tokens only), and an AttConv classifier's text x text alignment. The text has
    characters outside the BMP: the API's offsets count code points, JavaScript's UTF-16 units."""
    text = f"Great 🐶 dogs, ＡＢＣ and {UNKNOWN_WORD} 🐶🐶 ok"
    models = httpx.get(server.base + "/v1/models").json()["models"]
    name = next(m["name"] for m in models if m["task"] == "classification")
    real = api(server, "/classify", {"text": text, "model": name, "explain": True})
    tokens = real["explanation"]["tokens"]["text"]
    expected_spans = [text[t["start"]:t["end"]] for t in tokens]  # Python slices by code point
    assert "🐶" in expected_spans and "ＡＢＣ" in expected_spans

    def shown_with(answer: dict) -> None:
        open_page(driver, server, "classification")
        driver.execute_script(
            "const answer = arguments[0];"
            "const original = window.fetch;"
            "window.fetch = (url, init) => String(url).endsWith('/classify') ?"
            "  Promise.resolve(new Response(JSON.stringify(answer), {status: 200, headers: {'content-type': 'application/json'}}))"
            "  : original(url, init);", answer)
        driver.execute_script("document.getElementById('text').value = arguments[0]", text)
        submit(driver, "ctrl-enter", "text")
        assert shown_label(driver) == answer["label"]
        spans = tokens_in(driver, "text")
        check_tokens(spans, tokens)
        assert [s.text for s in spans] == expected_spans
        assert driver.find_element(By.CSS_SELECTOR, ".text-block .tokens").text == text

    no_attention = {**real, "explanation": {"method": None, "tokens": {"text": tokens}, "alignment": None,
                                            "token_weights": None, "evidence": None}}
    shown_with(no_attention)
    assert "this model exposes no attention weights" in driver.find_element(By.CSS_SELECTOR, ".no-attention").text.lower()
    assert driver.find_elements(By.CSS_SELECTOR, "figure.heatmap, .tok.weighted") == []

    n = len(tokens)
    self_alignment = {**real, "explanation": {
        "method": "AttConv intra-context attention", "tokens": {"text": tokens},
        "alignment": {"rows": "text", "columns": "text", "weights": [[1.0 / n] * n for _ in range(n)]}}}
    shown_with(self_alignment)
    check_heatmap(driver.find_element(By.CSS_SELECTOR, "figure.heatmap"), self_alignment["explanation"]["alignment"],
                  {"text": tokens}, "text", "text")
    assert console_errors(driver) == []


def test_the_forms_are_the_registrys(driver, server) -> None:
    """The page's tasks and their text boxes come from /ui/tasks.json (the task registry): one
    radio per task in the registry's order, then zero-shot; a box per field, a list field's one
    text per line; "Fill in an example" writes the task's registry example."""
    from core.tasks import TASKS

    open_page(driver, server, next(iter(TASKS)))
    radios = driver.find_elements(By.CSS_SELECTOR, 'input[name="task"]')
    assert [r.get_attribute("value") for r in radios] == [*TASKS, "zero_shot"]
    for name, task in TASKS.items():
        for f in task.fields:
            box = driver.find_element(By.CSS_SELECTOR, f'.field[data-task="{name}"][data-field="{f.name}"] textarea')
            label = driver.find_element(By.CSS_SELECTOR, f'label[for="{box.get_attribute("id")}"]').get_attribute("textContent")
            assert ("one per line" in label) == f.many, (name, f.name, label)
    task = next(t for t in TASKS.values() if t.list_field is not None and t.labelled)
    open_page(driver, server, task.name)
    driver.find_element(By.ID, "example").send_keys(Keys.ENTER)
    for f in task.fields:
        box = driver.find_element(By.CSS_SELECTOR, f'.field[data-task="{task.name}"][data-field="{f.name}"] textarea')
        value = task.example[f.name]
        assert box.get_attribute("value") == ("\n".join(value) if f.many else value)
    assert console_errors(driver) == []
