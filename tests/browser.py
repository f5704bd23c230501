"""Headless Chromium for the tests of the pages (the report, the review page).

Chromium is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON messages
separated by NUL bytes on file descriptors 3 and 4), so the tests need only the standard library:
no websocket client, no debugging port that another process could take or reach, and console
messages arrive as structured events rather than log lines scraped from stderr. Chromium is
Debian's package, installed by scripts/install-chromium.sh; `find_chromium` names it, or says why
the tests cannot run. The `chromium` fixture (tests/conftest.py) starts one for the session.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import ClassVar

# DevTools key events: (key, code, Windows virtual key code, text typed)
_KEYS = {
    "Enter": ("Enter", "Enter", 13, "\r"),
    "Escape": ("Escape", "Escape", 27, ""),
    "ArrowRight": ("ArrowRight", "ArrowRight", 39, ""),
    "ArrowLeft": ("ArrowLeft", "ArrowLeft", 37, ""),
}


def find_chromium() -> str | None:
    """The Chromium executable: $CHROMIUM, else `chromium` on the PATH, else None."""
    executable = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    return executable if Path(executable).exists() else None


class Chromium:
    """One headless Chromium, spoken to over the DevTools protocol on a pipe."""

    FLAGS: ClassVar[list[str]] = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--mute-audio",
        "--remote-debugging-pipe",
    ]

    def __init__(self, executable: str, workdir: Path):
        self.events: list[dict] = []
        self._buffer = b""
        self._next_id = 0
        self.log = workdir / "chromium.log"
        to_browser_r, self._to_browser = _high_pipe()
        self._from_browser, from_browser_w = _high_pipe()
        # Chromium reads commands on fd 3 and writes answers on fd 4; bash puts our pipe ends
        # there (they were moved above 9 so that no redirection clobbers another; dash, Debian's
        # sh, cannot name descriptors above 9).
        command = f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w}'
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [
                    "bash",
                    "-c",
                    command,
                    executable,
                    *self.FLAGS,
                    f"--user-data-dir={workdir / 'profile'}",
                    "about:blank",
                ],
                pass_fds=(to_browser_r, from_browser_w),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        os.close(to_browser_r)
        os.close(from_browser_w)

    def call(
        self,
        method: str,
        params: dict | None = None,
        session: str | None = None,
        timeout: float = 30,
    ) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == message["id"]:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, event: str, session: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not any(
            e.get("method") == event and e.get("sessionId") == session for e in self.events
        ):
            self.events.append(self._receive(deadline))

    def open(self, url: str, width: int = 1280, height: int = 900) -> str:
        """Load `url` in a new tab and wait for its load event; returns the tab's session id."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=session)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        self.call("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", session)
        return session

    def evaluate(self, expression: str, session: str):
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=session,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def console_errors(self, session: str) -> list[str]:
        """Console errors, uncaught exceptions and browser-logged errors (failed loads) of a tab."""
        errors = []
        for event in (e for e in self.events if e.get("sessionId") == session):
            params = event.get("params", {})
            method = event["method"]
            if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                errors.append(
                    " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
                )
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                errors.append(
                    f"{details.get('text', 'exception')} "
                    f"{details.get('exception', {}).get('description', '')}".strip()
                )
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                errors.append(params["entry"]["text"])
        return errors

    def wait_until(self, expression: str, session: str, timeout: float = 30) -> object:
        """Evaluate `expression` in the page until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression, session)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"page never satisfied: {expression}")
            time.sleep(0.05)

    def press(self, key: str, session: str) -> None:
        """Press and release one key as a person would (a letter, or a name in _KEYS)."""
        if key in _KEYS:
            name, code, virtual, text = _KEYS[key]
        else:
            name, code, virtual, text = key, f"Key{key.upper()}", ord(key.upper()), key
        down = {"type": "keyDown", "key": name, "code": code, "windowsVirtualKeyCode": virtual}
        if text:
            down["text"] = text
        self.call("Input.dispatchKeyEvent", down, session=session)
        self.call(
            "Input.dispatchKeyEvent",
            {"type": "keyUp", "key": name, "code": code, "windowsVirtualKeyCode": virtual},
            session=session,
        )

    def type_text(self, text: str, session: str) -> None:
        """Type text into the focused element (as an input method would commit it)."""
        self.call("Input.insertText", {"text": text}, session=session)

    def screenshot(self, session: str, path: Path, max_height: int = 12000) -> Path:
        size = self.call("Page.getLayoutMetrics", session=session)["cssContentSize"]
        clip = {
            "x": 0,
            "y": 0,
            "width": size["width"],
            "height": min(size["height"], max_height),
            "scale": 1,
        }
        data = self.call(
            "Page.captureScreenshot",
            {"format": "png", "clip": clip, "captureBeyondViewport": True},
            session=session,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data["data"]))
        return path

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except (RuntimeError, EOFError, TimeoutError, OSError):
            pass  # the browser may close the pipe before it answers
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_browser], [], [], max(0.0, remaining))
            if not ready:
                raise TimeoutError(f"Chromium did not answer in time; its log: {self._log_tail()}")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise EOFError(f"Chromium closed the pipe; its log: {self._log_tail()}")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""


def _high_pipe() -> tuple[int, int]:
    read, write = os.pipe()
    high = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (read, write))
    os.close(read)
    os.close(write)
    return high
