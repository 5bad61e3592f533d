"""The sandbox page in a real headless browser (Debian's chromium through Selenium and the system
chromedriver; nothing is downloaded).

``splits sandbox`` is started on a free localhost port over the default run, in a process whose
sockets refuse (and record) any connection or name lookup that is not this machine. The browser
types a planted lexicon of the sample corpus, and the lift, interval and p the page shows must be
those of ``results/hypotheses/lift.parquet`` for the same hypothesis; bad input must give a line
in the page; a table row must open in the query view; every request the page makes must go to the
app's own port. Screenshots go to the test's tmp dir. Skips, with the reason, where chromium,
chromedriver, Selenium or Gradio is missing."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import yaml
from splits.evaluation.common import display_names

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
LOCAL = ("127.0.0.1", "::1", "localhost")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="no chromium / chromedriver (apt-get install chromium chromium-driver)",
)
pytest.importorskip("selenium", reason="selenium is not installed (the test extra)")
pytest.importorskip("gradio", reason="gradio is not installed (the sandbox extra)")

# Runs the command with every non-local connection and name lookup refused and written to a log.
GUARDED_MAIN = f"""
import socket, sys
log_path = sys.argv[1]
LOCAL = {LOCAL!r}

def record(what):
    with open(log_path, "a", encoding="utf-8") as fh:
        fh.write(repr(what) + "\\n")

connect = socket.socket.connect
def guarded_connect(self, address):
    if isinstance(address, tuple) and address[0] not in LOCAL:
        record(("connect", address))
        raise OSError("network access refused by the test")
    return connect(self, address)
socket.socket.connect = guarded_connect

lookup = socket.getaddrinfo
def guarded_lookup(host, *args, **kwargs):
    name = host.decode() if isinstance(host, bytes) else host
    if name not in LOCAL and name is not None:
        record(("getaddrinfo", name))
        raise socket.gaierror("name lookup refused by the test")
    return lookup(host, *args, **kwargs)
socket.getaddrinfo = guarded_lookup

from splits.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"splits sandbox exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    pytest.fail(
        f"splits sandbox did not listen on {port} in {timeout} s:\n{log.read_text()[-4000:]}"
    )


@pytest.fixture(scope="module")
def app(default_run, tmp_path_factory):
    folder = tmp_path_factory.mktemp("sandbox")
    port = _free_port()
    blocked = folder / "blocked.log"
    blocked.touch()
    server_log = folder / "server.log"
    with open(server_log, "w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                GUARDED_MAIN,
                str(blocked),
                "sandbox",
                "--results",
                "results",
                "--configfile",
                "config/config.yaml",
                "--port",
                str(port),
            ],
            cwd=default_run,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        _wait_for_port(port, proc, server_log)
        yield {
            "url": f"http://127.0.0.1:{port}/",
            "port": port,
            "blocked": blocked,
            "log": server_log,
        }
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def browser(app, tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--no-first-run",
        "--window-size=1280,1600",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def table(default_run) -> pl.DataFrame:
    return pl.read_parquet(default_run / "results" / "hypotheses" / "lift.parquet")


def _wait(driver, condition, timeout: float = 60):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(condition)


def _choose(driver, elem_id: str, label: str) -> None:
    """Pick ``label`` in a Gradio dropdown by typing it and pressing Enter."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.CSS_SELECTOR, f"#{elem_id} input")
    box.click()
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(label)
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "ul[role=listbox] li"))
    box.send_keys(Keys.ENTER)
    _wait(driver, lambda d: box.get_attribute("value") == label)


def _ask(driver) -> None:
    """Click Ask and wait for its answer: the statistics table or a message. The previous ones are
    removed from the page first, so that an old answer is never read as the new one."""
    from selenium.webdriver.common.by import By

    driver.execute_script(
        "document.querySelectorAll('#sb-lift-table, #sb-message .sb-error')"
        ".forEach(e => e.remove());"
    )
    driver.find_element(By.CSS_SELECTOR, "#sb-ask").click()
    _wait(
        driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#sb-lift-table, #sb-message .sb-error")
    )


def _shown_rows(driver) -> dict[float, dict]:
    from selenium.webdriver.common.by import By

    out = {}
    for row in driver.find_elements(By.CSS_SELECTOR, "#sb-lift-table tr.sb-row"):
        cell = {
            name: row.find_element(By.CSS_SELECTOR, f".sb-{name}")
            for name in ("lift", "low", "high", "p")
        }
        out[float(row.get_attribute("data-k"))] = {
            name: (float(e.get_attribute("data-value")), e.text) for name, e in cell.items()
        }
    return out


def test_page_shows_the_run_numbers_offline(app, browser, table, tmp_path, default_run):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    planted = (
        table.filter((pl.col("source") == "planted") & (pl.col("k_fraction") == 0.05))
        .sort("q_value", "hypothesis_id")
        .row(0, named=True)
    )
    other = (
        planted["demographic_B"]
        if planted["target"] == planted["demographic_A"]
        else planted["demographic_A"]
    )
    job = table.filter(pl.col("hypothesis_id") == planted["hypothesis_id"]).sort("k_fraction")
    browser.get(app["url"])
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#sb-lexicon textarea"))
    config = yaml.safe_load((default_run / "config" / "config.yaml").read_text())
    names = display_names(default_run / config["demographics"]["file"])
    _choose(browser, "sb-topic", planted["topic"])
    _choose(browser, "sb-target", names[planted["target"]])
    _choose(browser, "sb-other", names[other])
    lexicon = browser.find_element(By.CSS_SELECTOR, "#sb-lexicon textarea")
    lexicon.send_keys(", ".join(f'"{entry}"' for entry in planted["lexicon"]))
    _ask(browser)
    shown = _shown_rows(browser)
    assert sorted(shown) == job["k_fraction"].to_list()
    for row in job.iter_rows(named=True):
        mine = shown[row["k_fraction"]]
        assert mine["lift"][0] == pytest.approx(row["lift"], rel=1e-12)
        assert mine["lift"][1] == f"{row['lift']:.3f}"
        assert mine["low"][0] == pytest.approx(row["lift_low"], rel=1e-12)
        assert mine["high"][0] == pytest.approx(row["lift_high"], rel=1e-12)
        assert mine["p"][0] == pytest.approx(row["p_value"], rel=1e-12)
    run_line = browser.find_element(By.CSS_SELECTOR, ".sb-run").text
    assert planted["hypothesis_id"] in run_line
    # highlighted matches; groups hidden until asked for, then the planted target leads
    posts = browser.find_element(By.CSS_SELECTOR, "#sb-posts")
    assert posts.find_elements(By.CSS_SELECTOR, "mark")
    assert not posts.find_elements(By.CSS_SELECTOR, "[data-group]")
    assert browser.find_element(By.CSS_SELECTOR, "#sb-curve img, #sb-curve canvas, #sb-curve svg")
    browser.save_screenshot(str(tmp_path / "sandbox-query.png"))
    browser.find_element(By.CSS_SELECTOR, "#sb-show-groups input").click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#sb-posts [data-group]"))
    groups = [
        e.get_attribute("data-group")
        for e in browser.find_elements(By.CSS_SELECTOR, "#sb-posts [data-group]")
    ]
    assert len(groups) == 20 and groups[:3] == [planted["target"]] * 3
    browser.save_screenshot(str(tmp_path / "sandbox-groups.png"))
    assert (tmp_path / "sandbox-query.png").stat().st_size > 10_000

    # bad input: a line in the page, no traceback
    for bad, expected in (("", "the lexicon is empty"), ('":-)"', "no letter or digit")):
        lexicon.send_keys(Keys.CONTROL, "a")
        lexicon.send_keys(Keys.DELETE)
        if bad:
            lexicon.send_keys(bad)
        _ask(browser)
        message = browser.find_element(By.CSS_SELECTOR, "#sb-message").text
        assert expected in message
        assert "Traceback" not in browser.page_source
    browser.save_screenshot(str(tmp_path / "sandbox-error.png"))

    # every request of the page went to the app itself
    requests = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requests.append(message["params"]["request"]["url"])
    web = [u for u in requests if u.startswith(("http:", "https:", "ws:", "wss:"))]
    assert web, "no request recorded"
    outside = [
        u
        for u in web
        if not u.startswith((f"http://127.0.0.1:{app['port']}/", f"ws://127.0.0.1:{app['port']}/"))
    ]
    assert not outside, outside[:5]
    assert app["blocked"].read_text() == "", app["blocked"].read_text()
    assert "Traceback" not in app["log"].read_text()


def test_a_table_row_opens_in_the_query_view(app, browser, table, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(app["url"])
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#sb-lexicon textarea"))
    tab = next(
        t for t in browser.find_elements(By.CSS_SELECTOR, "button[role=tab]") if "table" in t.text
    )
    tab.click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#sb-table [role=gridcell]"))
    _choose(browser, "sb-source", "theory")
    _choose(browser, "sb-stage", "significant (q < 0.05)")
    _wait(
        browser,
        lambda d: "hypotheses at k" in d.find_element(By.CSS_SELECTOR, "#sb-table-count").text,
    )
    expected = table.filter(
        (pl.col("k_fraction") == 0.05) & (pl.col("source") == "theory") & (pl.col("q_value") < 0.05)
    )

    def counted(d):
        text = d.find_element(By.CSS_SELECTOR, "#sb-table-count").text
        return text if f"of {expected.height:,} hypotheses" in text else False

    _wait(browser, counted)
    cells = browser.find_elements(By.CSS_SELECTOR, "#sb-table [role=gridcell]")
    hypothesis_id = cells[0].text
    assert hypothesis_id in set(expected["hypothesis_id"])
    browser.save_screenshot(str(tmp_path / "sandbox-table.png"))
    cells[2].click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".sb-run"))
    assert hypothesis_id in browser.find_element(By.CSS_SELECTOR, ".sb-run").text
    job = table.filter(pl.col("hypothesis_id") == hypothesis_id).sort("k_fraction")
    shown = _shown_rows(browser)
    assert [shown[k]["lift"][0] for k in job["k_fraction"]] == pytest.approx(job["lift"].to_list())
