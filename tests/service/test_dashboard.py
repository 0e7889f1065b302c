"""The live diversity page: `GET /v1/dashboard` (a job's per-step figures, behind the API key)
and `GET /dashboard` (the page) on a real service fed by a trainer-like client, step by step.

The browser test drives Debian's Chromium (scripts/install-browser.sh) with Selenium: the page
loads with no console error, the points it plots equal the JSON it reads, it updates live as the
trainer sends steps, and it shows the collapse alert once the answers collapse. It saves the
screenshot docs/images/dashboard.png (committed; rewritten when REWEIGHTER_SCREENSHOT=1)."""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import loopback, no_retry

from reweighter.client import ReweighterClient
from reweighter.engine import ReweightEngine
from reweighter.engine.board import COLLAPSE_STEPS, DiversityBoard
from reweighter.service import BackgroundService
from reweighter.types import Group, ReweightRequest

KEY = "dash-s3cret"
ROOT = Path(__file__).resolve().parents[2]
SHOT = ROOT / "docs" / "images" / "dashboard.png"
METRICS = [
    "distinct_answers",
    "effective_size",
    "mean_similarity",
    "lambda",
    "zero_spread_share",
    "latency_ms",
]
DIVERSE = [("x = 4 because 2 + 2 = 4.", "4"), ("Two plus two is four.", "4"),
           ("I get 5 by counting.", "5"), ("It must be 22.", "22")]  # fmt: skip
COLLAPSED = [("The answer is 4.", "4")] * 4


def _request(step: int, collapsed: bool, prompts: int = 2) -> ReweightRequest:
    """One training step of a trainer: `prompts` groups of 4 completions with their answers."""
    rows = COLLAPSED if collapsed else DIVERSE
    groups = [
        Group(
            rewards=[1.0 if a == "4" else 0.0 for _, a in rows],
            completions=[f"{t} (prompt {p})" for t, _ in rows],
            answers=[a for _, a in rows],
        )
        for p in range(prompts)
    ]
    return ReweightRequest(groups=groups, method="mmr", advantages="grpo", step=step)


@pytest.fixture(scope="module")
def svc(engine: ReweightEngine) -> Iterator[BackgroundService]:
    engine.board = DiversityBoard(engine.settings.dashboard_steps)  # this module's steps only
    with BackgroundService(loopback(api_key=KEY), engine) as s:
        yield s


@pytest.fixture(scope="module")
def client(svc: BackgroundService) -> Iterator[ReweighterClient]:
    with ReweighterClient(svc.http_url, api_key=KEY, retry=no_retry()) as c:
        yield c


def _data(svc: BackgroundService) -> dict:
    r = httpx.get(f"{svc.http_url}/v1/dashboard", headers={"authorization": f"Bearer {KEY}"})
    r.raise_for_status()
    return r.json()


def test_steps_aggregate_what_the_answers_say(
    svc: BackgroundService, client: ReweighterClient, engine: ReweightEngine
):
    engine.board = DiversityBoard(10)
    answers = []
    for step in range(3):
        first = client.reweight(_request(step, collapsed=False))
        second = client.reweight(_request(step, collapsed=False, prompts=1))  # same step again
        answers.append([*first.groups, *second.groups])
    data = _data(svc)
    assert data["job"] == "default" and [s["step"] for s in data["steps"]] == [0, 1, 2]
    first = data["steps"][0]
    assert first["requests"] == 2 and first["groups"] == 3
    assert first["distinct_answers"] == 3 and first["distinct_answers_median"] == 3
    sims = [g.stats.mean_similarity for g in answers[0]]
    assert first["mean_similarity"] == pytest.approx(statistics.mean(sims), abs=1e-3)
    lambdas = [g.stats.lambda_ for g in answers[0]]
    assert first["lambda"] == pytest.approx(statistics.mean(lambdas), abs=1e-3)
    assert first["zero_spread_share"] == 0 and first["latency_ms"] > 0
    assert data["collapse"]["firing"] is False


def test_collapse_fires_after_its_steps_and_the_ring_is_bounded(
    svc: BackgroundService, client: ReweighterClient, engine: ReweightEngine
):
    engine.board = DiversityBoard(max_steps=4)
    client.reweight(_request(0, collapsed=False))
    for step in range(1, COLLAPSE_STEPS + 1):
        assert _data(svc)["collapse"]["firing"] is False
        client.reweight(_request(step, collapsed=True))
    data = _data(svc)
    assert data["collapse"]["firing"] is True and data["collapse"]["since_step"] == 1
    last = data["steps"][-1]
    assert last["distinct_answers"] == 1 and last["zero_spread_share"] == 1.0
    assert last["effective_size"] == pytest.approx(1.0, abs=1e-3)
    client.reweight(_request(COLLAPSE_STEPS + 1, collapsed=False))
    data = _data(svc)
    assert data["collapse"]["firing"] is False
    assert [s["step"] for s in data["steps"]] == [1, 2, 3, 4]  # 4 kept, the oldest dropped


def test_data_needs_the_key_and_the_page_carries_none(svc: BackgroundService):
    assert httpx.get(f"{svc.http_url}/v1/dashboard").status_code == 401
    wrong = httpx.get(f"{svc.http_url}/v1/dashboard", headers={"authorization": "Bearer no"})
    assert wrong.status_code == 401
    page = httpx.get(f"{svc.http_url}/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/v1/dashboard" in page.text and "<script src" not in page.text  # nothing fetched
    assert "http://" not in page.text.replace("http://www.w3.org/2000/svg", "")


# -- the browser --------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser() -> Iterator[object]:
    if not (CHROMIUM and DRIVER):
        pytest.skip("Chromium missing: bash scripts/install-browser.sh")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1000,760",
                "--disable-dev-shm-usage", "--disable-extensions"):  # fmt: skip
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver, cond, timeout: float = 20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = driver.execute_script(cond)
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for: {cond}")


def _plotted(driver) -> dict[str, list[tuple[int, float]]]:
    return driver.execute_script(
        """const out = {};
        for (const svg of document.querySelectorAll("svg[data-metric]")) {
          out[svg.dataset.metric] = [...svg.querySelectorAll("circle.pt")].map(
            c => [Number(c.dataset.step), Number(c.dataset.value)]);
        }
        return out;"""
    )


def _assert_plotted_equals_json(driver, data: dict) -> None:
    plotted = _plotted(driver)
    assert sorted(plotted) == sorted(METRICS)
    for metric in METRICS:
        want = [(s["step"], s[metric]) for s in data["steps"] if s[metric] is not None]
        got = plotted[metric]
        assert [p[0] for p in got] == [w[0] for w in want], metric
        assert [p[1] for p in got] == pytest.approx([w[1] for w in want], abs=1e-9), metric


@pytest.mark.timeout(180)  # slow by its `browser` fixture (tests/conftest.py); bounded here
def test_the_page_in_chromium_plots_the_json_live(
    svc: BackgroundService, client: ReweighterClient, engine: ReweightEngine, browser
):
    driver = browser
    engine.board = DiversityBoard(engine.settings.dashboard_steps)
    for step in range(3):  # a trainer's first steps
        client.reweight(_request(step, collapsed=False))
    driver.get(f"{svc.http_url}/dashboard?interval=300#key={KEY}")
    _wait(driver, "return document.body.dataset.steps === '3'")
    _assert_plotted_equals_json(driver, _data(svc))
    assert driver.execute_script("return document.body.dataset.collapse") == "false"
    assert not driver.find_element("id", "collapse").is_displayed()
    assert "#key" not in driver.current_url  # the key left the address bar

    for step in range(3, 3 + COLLAPSE_STEPS + 1):  # training goes on, and collapses
        client.reweight(_request(step, collapsed=True))
    want = str(3 + COLLAPSE_STEPS + 1)
    _wait(driver, f"return document.body.dataset.steps === '{want}'")
    _wait(driver, "return document.body.dataset.collapse === 'true'")
    data = _data(svc)
    _assert_plotted_equals_json(driver, data)
    alert = driver.find_element("id", "collapse")
    assert data["collapse"]["since_step"] == 3  # the first collapsed step
    assert alert.is_displayed() and "since step 3" in alert.text

    errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == []
    out = SHOT if os.environ.get("REWEIGHTER_SCREENSHOT") == "1" else None
    png = driver.get_screenshot_as_png()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    if out is not None:
        out.parent.mkdir(exist_ok=True)
        out.write_bytes(png)
    assert SHOT.exists(), "docs/images/dashboard.png: run with REWEIGHTER_SCREENSHOT=1"
