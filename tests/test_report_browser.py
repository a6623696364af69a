"""The HTML report in a real headless Chromium: tables and images there, no console errors.

Chromium is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON
messages ended by NUL on fds 3 and 4), so no websocket client or browser driver is needed.
"""
import base64
import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from matrixbench.report import build_report

FIXTURES = Path(__file__).parent / "fixtures"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe")
TIMEOUT_S = 60
PAGE_FACTS = """(() => ({
  tables: document.querySelectorAll("table").length,
  rows: document.querySelectorAll("tbody tr").length,
  emptyCells: [...document.querySelectorAll("td, th")].filter(cell => !cell.textContent.trim()).length,
  images: [...document.images].map(img => ({complete: img.complete, width: img.naturalWidth})),
  sections: [...document.querySelectorAll("h2")].map(h => h.textContent),
}))()"""

pytestmark = [pytest.mark.browser, pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")]


class DevTools:
    """A Chromium process and one page, spoken to over the DevTools pipe."""

    def __init__(self, profile_dir, log_path):
        to_browser, self._to_browser = os.pipe()
        self._from_browser, from_browser = os.pipe()
        self._log = open(log_path, "wb")
        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile_dir}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, close_fds=False,
            preexec_fn=lambda: _as_fds_3_and_4(to_browser, from_browser))
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._next_id, self.events, self.session = b"", 0, [], None

    def open_page(self, width=1280, height=900):
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)

    def load(self, url):
        self.send("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression):
        reply = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return reply["result"]["value"]

    def screenshot(self, full_page):
        params = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        return base64.b64decode(self.send("Page.captureScreenshot", **params)["data"])

    def console_errors(self):
        """Console errors, uncaught exceptions and error log entries (failed loads) seen so far."""
        errors = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                errors.append("console: " + " ".join(str(arg.get("value", arg.get("description")))
                                                     for arg in params["args"]))
            elif method == "Runtime.exceptionThrown":
                errors.append("exception: " + params["exceptionDetails"].get("text", ""))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                errors.append("log: " + params["entry"]["text"])
        return errors

    def send(self, method, **params):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if self.session and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self.session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._to_browser, data):]
        return self._reply(self._next_id, method)

    def _reply(self, message_id, method):
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            message = self._read(deadline)
            if message.get("id") == message_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self.events.append(message)

    def wait_for(self, event_method):
        deadline = time.monotonic() + TIMEOUT_S
        while not any(event.get("method") == event_method for event in self.events):
            self.events.append(self._read(deadline))

    def _read(self, deadline):
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._from_browser], [], [], remaining)[0]:
                raise TimeoutError(f"no DevTools message from Chromium within {TIMEOUT_S}s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium closed the DevTools pipe (exit code {self.process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self):
        try:
            self.send("Browser.close")
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            os.close(fd)
        self._log.close()


def _as_fds_3_and_4(read_end, write_end):
    """In the child: the browser reads commands on fd 3 and writes replies on fd 4."""
    read_copy = fcntl.fcntl(read_end, fcntl.F_DUPFD, 10)
    write_copy = fcntl.fcntl(write_end, fcntl.F_DUPFD, 10)
    os.dup2(read_copy, 3)
    os.dup2(write_copy, 4)


@pytest.fixture
def browser(tmp_path):
    devtools = DevTools(tmp_path / "profile", tmp_path / "chromium.log")
    try:
        devtools.open_page()
        yield devtools
    finally:
        devtools.close()


def _png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_report_renders_with_tables_images_and_no_console_errors(tmp_path, browser):
    build_report([FIXTURES / "gpu-run", FIXTURES / "cpu-run"], tmp_path / "report", ["html"])
    html_path = tmp_path / "report" / "report.html"
    browser.load(html_path.as_uri())
    facts = browser.evaluate(PAGE_FACTS)
    top, page = browser.screenshot(full_page=False), browser.screenshot(full_page=True)
    (tmp_path / "top.png").write_bytes(top)
    (tmp_path / "page.png").write_bytes(page)

    assert browser.console_errors() == []
    html = html_path.read_text(encoding="utf-8")
    assert facts["tables"] == html.count("<table>") >= 8
    assert facts["rows"] > 50 and facts["emptyCells"] == 0
    # cpu-run: latency, speed-up; gpu-run: 5 per batch size (latency, speed-up, images, image change, mode change)
    # + measured vs published; a compile break-even chart per device and batch size (What it costs): 2 + 11 + 3
    assert len(facts["images"]) == 16
    assert all(image["complete"] and image["width"] > 0 for image in facts["images"])
    assert facts["sections"][:3] == ["Summary", "Charts", "Latency per device and batch size"]
    assert _png_size(top) == (1280, 900)
    width, height = _png_size(page)
    assert width <= 1280 and height > 3000   # no horizontal overflow; the whole report


def test_the_harness_sees_console_errors_and_broken_images(tmp_path, browser):
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><body><img src="missing.png">'
                    '<script>console.error("boom")</script></body></html>')
    browser.load(page.as_uri())
    facts = browser.evaluate(PAGE_FACTS)
    assert "console: boom" in browser.console_errors()
    assert facts["images"] == [{"complete": True, "width": 0}]
