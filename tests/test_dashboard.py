"""The Dask dashboard whose link dkpca prints works: a real browser renders it during a fit (issue 39, item 1).

Headless Chromium (Debian's ``chromium``; ``.ci/run`` installs it) is driven through its DevTools protocol
(a websocket, here tornado's client, which distributed brings): it loads the dashboard of a LocalCluster that
dkpca started while a fit runs, and the test reads the rendered page -- Bokeh's documents in the browser, the
task stream and progress plots' data -- not the server's Python objects.  Reference: distributed's own page
without bokeh is "Dask needs bokeh>=3.1.0 for the dashboard." and renders no Bokeh document; dkpca's tasks are
named by dask's ``key_split`` of their keys (``dkpca-gram``, ``dkpca-pass-group_products``): no hex hashes.
Skipped, with the reason, where no browser is installed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from typing import Any

import pytest

import dkpca
from tests.conftest import make_data

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no headless browser installed (Debian: apt-get install "
                                                        "chromium; .ci/run installs it)")

#: what the page says about itself, evaluated in the browser: Bokeh's documents and every task name in their data
PAGE_STATE = """(() => {
  const text = document.body ? document.body.innerText.slice(0, 500) : "";
  if (typeof Bokeh === "undefined") return JSON.stringify({bokeh: false, roots: 0, names: [], text});
  const names = new Set(); let roots = 0;
  for (const doc of Bokeh.documents) {
    roots += doc.roots().length;
    for (const m of doc.all_models) if (m.data && m.data.name) for (const x of m.data.name) names.add(String(x));
  }
  return JSON.stringify({bokeh: true, roots, names: [...names], text});
})()"""


class Browser:
    """Headless Chromium with its DevTools endpoint on a free port (read from its log)."""

    def __init__(self, profile: str, size: tuple[int, int] = (1400, 900)) -> None:
        self.log = os.path.join(profile, "chromium.log")
        self.scratch = tempfile.mkdtemp(prefix="dkpca-chromium-")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
                 f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}", "about:blank"],
                # its singleton socket's directory (a short path: a socket's is limited to 107 bytes) and caches
                # go where close() removes them, not left in /tmp or ~
                env={**os.environ, "TMPDIR": self.scratch, "XDG_CACHE_HOME": profile, "XDG_CONFIG_HOME": profile},
                stdout=subprocess.DEVNULL, stderr=log)
        end, port = time.monotonic() + 30, None
        while port is None and time.monotonic() < end and self.proc.poll() is None:
            with open(self.log) as log:
                found = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", log.read())
            port = int(found.group(1)) if found else time.sleep(0.1)
        if port is None:
            self.close()
            raise RuntimeError(f"{BROWSER} did not start: {open(self.log).read()[-2000:]}")
        pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        self.page = next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        shutil.rmtree(self.scratch, ignore_errors=True)


async def watch_page(ws_url: str, url: str, done: Any, timeout: float, screenshot: str | None = None) -> dict:
    """Load ``url`` and evaluate :data:`PAGE_STATE` until ``done(state)`` or ``timeout``; the last state."""
    from tornado.websocket import websocket_connect

    ws = await websocket_connect(ws_url, max_message_size=64 << 20)
    ids = iter(range(1, 1 << 30))

    async def call(method: str, **params: Any) -> dict:
        n = next(ids)
        await ws.write_message(json.dumps({"id": n, "method": method, "params": params}))
        while True:  # events (no id) and other answers are skipped
            msg = json.loads(await ws.read_message())
            if msg.get("id") == n:
                return msg.get("result", {})

    try:
        await call("Page.enable")
        await call("Page.navigate", url=url)
        state, end = {}, time.monotonic() + timeout
        while time.monotonic() < end and not done(state):
            await asyncio.sleep(0.25)
            value = (await call("Runtime.evaluate", expression=PAGE_STATE, returnByValue=True)).get("result", {})
            if isinstance(value.get("value"), str):
                state = json.loads(value["value"])
        if screenshot is not None:
            shot = await call("Page.captureScreenshot", format="png")
            with open(screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
        await call("Page.navigate", url="about:blank")  # the dashboard's session ends before the browser goes
        return state
    finally:
        ws.close()


def dkpca_names(state: dict) -> set[str]:
    return {name for name in state.get("names", []) if "dkpca" in name}


def fitted_dashboard(tmp_path, screenshot: str | None = None, timeout: float = 20.0, tol: float = 1e-12
                     ) -> tuple[dict, str]:
    """The rendered dashboard of a LocalCluster dkpca starts, watched while a fit runs on it: (state, link)."""
    data = tmp_path / "x.npy"
    import numpy as np

    np.save(data, make_data(4000, d=8))
    local = {"n_workers": 1, "threads_per_worker": 2, "dashboard_address": "127.0.0.1:0"}
    errors: list[BaseException] = []

    def run_fit() -> None:
        try:
            dkpca.fit(str(data), n_components=3, chunk_size=1000, solver="randomized", tol=tol,
                      store=tmp_path / "s.zarr")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    def seen_all(state: dict) -> bool:
        names = dkpca_names(state)
        return any("dkpca-gram" in n for n in names) and any("dkpca-pass" in n for n in names)

    profile = tmp_path / "browser"
    profile.mkdir()
    with dkpca.cluster.connected({"dkpca": {"cluster": {"backend": "local", "local": local}}}) as client:
        link = client.dashboard_link
        browser = Browser(str(profile))
        fit = threading.Thread(target=run_fit)
        try:
            fit.start()  # the browser loads the page while the fit runs; the task stream keeps what it saw
            state = asyncio.run(watch_page(browser.page, link, seen_all, timeout, screenshot))
        finally:
            fit.join()
            browser.close()
    assert not errors, errors
    return state, link


def test_dashboard_renders_and_shows_dkpcas_tasks_by_name(tmp_path):
    """Before (no bokeh installed with dkpca): the page was distributed's error text, no Bokeh document."""
    t = time.monotonic()
    state, link = fitted_dashboard(tmp_path)
    assert link.startswith("http://127.0.0.1:") and link.endswith("/status")
    assert "Dask needs bokeh" not in state.get("text", ""), state.get("text")
    assert state.get("bokeh") and state.get("roots", 0) >= 1, state  # Bokeh rendered the dashboard's plots
    names = dkpca_names(state)
    assert any("dkpca-gram" in n for n in names), names  # the Gram blocks
    assert any("dkpca-pass" in n for n in names), names  # the solver's passes
    assert not [n for n in names if re.search(r"[0-9a-f]{8,}", n)], names  # readable: no key hashes
    assert time.monotonic() - t < 60


@pytest.mark.skipif(not os.environ.get("DKPCA_DASHBOARD_PNG"), reason="set DKPCA_DASHBOARD_PNG=path to save one")
def test_dashboard_screenshot(tmp_path):
    """``DKPCA_DASHBOARD_PNG=/tmp/dashboard.png pytest tests/test_dashboard.py``: a screenshot during a fit."""
    path = os.environ["DKPCA_DASHBOARD_PNG"]
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
    fitted_dashboard(tmp_path, screenshot=path, tol=1e-15)  # taken once the passes show: 60 of them run
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
