"""Headless Chromium driven through its DevTools protocol (CDP), for the documentation site's tests.

``chromium --dump-dom`` shows a page once its scripts ran, but the site's search only runs once somebody types into
its box, and whether a code block shows a scrollbar depends on the laid-out page: both need a page the test can type
into and ask questions of while it stays open. One browser serves a whole test module (a tab per page); the protocol
is spoken over a websocket with tornado's client (installed with the test extras' Jupyter kernel).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tornado.websocket import WebSocketClientConnection, websocket_connect

#: Every wait is a poll with this bound: far above what a page needs on a quiet machine (under a second), so that a
#: loaded 2-core machine sharing its cores with a full suite run does not fail a test by being slow
PATIENCE = 60.0
#: The window the layout checks measure against: a common laptop screen's width
WINDOW = (1280, 900)


class Chromium:
    """One headless Chromium with its own throw-away profile, for the pages a test module opens."""

    def __init__(self, executable: Path) -> None:
        self._profile = tempfile.mkdtemp(prefix="sharegroup-chromium-")
        self._loop = asyncio.new_event_loop()
        self._process = subprocess.Popen(
            [str(executable), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", f"--user-data-dir={self._profile}",
             f"--window-size={WINDOW[0]},{WINDOW[1]}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # Chromium writes the port it chose (port 0: any free one) into the profile once it listens
        self.port = int(_poll(self._port, "Chromium's DevTools port", lambda: ""))

    def _port(self) -> str:
        """The DevTools port once Chromium wrote it, else ""; fails at once if Chromium exited."""
        if self._process.poll() is not None:
            assert self._process.stderr is not None
            raise AssertionError(f"Chromium exited with {self._process.returncode}: "
                                 f"{self._process.stderr.read().decode()[-2000:]}")
        written = Path(self._profile) / "DevToolsActivePort"
        return written.read_text().split("\n")[0].strip() if written.exists() else ""

    def open(self, url: str) -> Tab:
        """A new tab showing ``url``, once its document has loaded (its scripts ran)."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new", method="PUT")
        with urllib.request.urlopen(request, timeout=PATIENCE) as response:
            target = json.load(response)
        tab = Tab(self._loop, self._loop.run_until_complete(_connect(target["webSocketDebuggerUrl"])))
        # a headless tab is never the focused window, so an element's focus() fires no focus event: emulate a page in
        # front of its reader, as a person's browser shows it
        tab.call("Emulation.setFocusEmulationEnabled", enabled=True)
        tab.go(url)
        return tab

    def close(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        assert self._process.stderr is not None
        self._process.stderr.close()
        self._loop.close()
        shutil.rmtree(self._profile, ignore_errors=True)


class Tab:
    """One page: JavaScript evaluated in it, keys typed into it, conditions polled in it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, socket: WebSocketClientConnection) -> None:
        self._loop = loop
        self._socket = socket
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One protocol command and its result; the events the tab sends meanwhile are not asked for and dropped."""
        return self._loop.run_until_complete(asyncio.wait_for(self._call(method, params), PATIENCE))

    async def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        sent = next(self._ids)
        await self._socket.write_message(json.dumps({"id": sent, "method": method, "params": params}))
        while True:
            message = await self._socket.read_message()
            assert isinstance(message, str), f"the tab closed during {method}"
            answer = json.loads(message)
            if answer.get("id") == sent:
                assert "error" not in answer, f"{method}: {answer['error']}"
                return answer["result"]

    def go(self, url: str) -> None:
        """Show ``url`` in this tab, once its document has loaded (its scripts ran)."""
        self.call("Page.navigate", url=url)
        # until the navigation commits, the tab's document is the previous one, which is complete too
        self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'", f"{url} to load")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-able values only)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, f"{expression}: {result['exceptionDetails']}"
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str) -> Any:
        """The expression's first truthy value, polled; fails naming ``what`` and the last value seen."""
        seen: list[Any] = []

        def value() -> Any:
            seen[:] = [self.evaluate(expression)]
            return seen[0]

        return _poll(value, what, lambda: f"last value: {seen[0]!r}" if seen else "")

    def type(self, text: str) -> None:
        """Type ``text`` into the focused element, key by key: key down (the character) and key up, as a person
        does (the site's search reads its box on key up)."""
        for character in text:
            self.call("Input.dispatchKeyEvent", type="keyDown", text=character, key=character)
            self.call("Input.dispatchKeyEvent", type="keyUp", key=character)

    def close(self) -> None:
        self._socket.close()


async def _connect(url: str) -> WebSocketClientConnection:
    """A websocket to ``url`` on the running loop (tornado binds a connection to the loop it starts on)."""
    return await asyncio.wait_for(websocket_connect(url, max_message_size=64 << 20), PATIENCE)


def _poll(condition: Callable[[], Any], what: str, detail: Callable[[], str]) -> Any:
    """``condition()``'s first truthy value within PATIENCE seconds."""
    deadline = time.monotonic() + PATIENCE
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {PATIENCE:.0f}s for {what}; {detail()}")
        time.sleep(0.1)
