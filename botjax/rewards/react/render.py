"""Render bundled components in headless Chromium through Playwright, contained.

One long-lived browser serves many items; each item gets a fresh browser context (its own cookies,
storage and renderer process) holding a page built with `page.set_content` from the inlined vendor
bundles, the component bundle and its Tailwind CSS, so nothing is fetched. Containment, in layers:

- network: a Content-Security-Policy of `default-src 'none'` (inline script and style only, data:
  images and fonts); `context.route('**/*')` aborts every request and `route_web_socket` closes every
  WebSocket; the context is offline; the browser's proxy and DNS point nowhere. A blocked fetch,
  XHR, WebSocket, script or navigation makes the item a failure (`fail_on_network`).
- files: the page is `about:blank` with no file access; the browser's profile, downloads and
  TMPDIR live in a fresh temporary directory removed when the browser closes.
- time: one deadline per item covers loading, mounting, settling and the screenshot; past it the
  context is closed, and if closing hangs the browser is killed and relaunched.
- memory: V8's heap limit (`--js-flags=--max-old-space-size`) plus a watchdog that kills any
  renderer process whose resident memory passes `memory_mb`; a crashed page is a failure.
- output: console messages are counted and only the first few errors kept; a flood of console
  messages is a failure.
"""
from __future__ import annotations

import asyncio
import dataclasses
import io
import os
import shutil
import signal
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence

from botjax.rewards.react.toolchain import ToolchainError, find_chromium

VIEWPORT = (1280, 800)
_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "img-src data: blob:; font-src data:; media-src data: blob:")
# Defined before any other script: the mount code reports through it; blocked network access
# (CSP violations) and uncaught errors before mounting make the item fail.
_STATUS_SCRIPT = """
window.__botjax = {
  state: 'pending', error: null, network: [],
  fail(m) { if (this.state !== 'error') { this.state = 'error'; this.error = String(m).slice(0, 2000); } },
  mounted() { if (this.state === 'pending') this.state = 'mounted'; },
};
document.addEventListener('securitypolicyviolation', (e) => {
  const d = e.effectiveDirective || e.violatedDirective || '';
  if (d.startsWith('img-src') || d.startsWith('font-src') || d.startsWith('media-src')) return;
  window.__botjax.network.push(d + ' ' + String(e.blockedURI).slice(0, 200));
});
window.addEventListener('error', (e) => {
  if (window.__botjax.state === 'pending') window.__botjax.fail('uncaught error: ' + (e.message || e));
});
(() => {
  // Count console calls in the page and forward only the first LIMIT, so a flood costs nothing.
  window.__botjax.console = 0;
  for (const k of ['log', 'info', 'warn', 'error', 'debug', 'trace', 'dir', 'table']) {
    const orig = console[k].bind(console);
    console[k] = (...args) => {
      window.__botjax.console += 1;
      if (window.__botjax.console <= __LIMIT__) orig(...args);
    };
  }
})();
"""
# Request types whose (blocked) attempt counts as network access; images, fonts and media only
# render as missing.
_NETWORK_TYPES = frozenset({"fetch", "xhr", "websocket", "eventsource", "script", "document",
                            "other", "manifest", "texttrack", "stylesheet"})


def _escape(text: str, tag: str) -> str:
  """Keeps inlined text from closing its <script>/<style> element."""
  return text.replace(f"</{tag}", f"<\\/{tag}").replace(f"</{tag.upper()}", f"<\\/{tag.upper()}")


def page_html(bundle: str, css: str = "", vendor_scripts: Sequence[str] = (), *,
              max_console_messages: int = 200) -> str:
  """The self-contained page of one item: CSP, CSS, status hook, vendor bundles, component bundle.

  Args:
    bundle: the component's IIFE bundle (`CompileResult.bundle`).
    css: its Tailwind CSS.
    vendor_scripts: texts of the vendor bundles it needs (`NodePool.vendor(name)`), in order.
    max_console_messages: console calls past this count are dropped inside the page.
  """
  status = _STATUS_SCRIPT.replace("__LIMIT__", str(int(max_console_messages)))
  scripts = [status, *vendor_scripts, bundle]
  body = "".join(f"<script>{_escape(s, 'script')}</script>" for s in scripts)
  return ("<!doctype html><html><head><meta charset=\"utf-8\">"
          f"<meta http-equiv=\"Content-Security-Policy\" content=\"{_CSP}\">"
          f"<style>{_escape(css or '', 'style')}</style></head>"
          f"<body><div id=\"root\"></div>{body}</body></html>")


@dataclasses.dataclass(frozen=True)
class RenderResult:
  """How one page rendered.

  A blank page renders: the component mounted and the page was shot, it just shows nothing. That
  is the paper's notion of "renders" (BoT-GRPO, arXiv 2610.09804, App. C: a blank page still
  counts as compiled); `visible` is the stricter "renders something visible".

  Attributes:
    ok: mounted without error and nothing forbidden attempted (a blank page is ok).
    screenshot: PNG bytes of the 1280x800 viewport, or None when no screenshot was taken.
    blank: the screenshot is a single colour (nothing visible rendered).
    error: why the item failed (None when ok).
    console_errors: the first console errors and page errors (each truncated).
    console_count: number of console messages of any type.
    text: the page's visible text (truncated), for inspection.
    seconds: wall time of the item.
  """
  ok: bool
  screenshot: bytes | None = None
  blank: bool = True
  error: str | None = None
  console_errors: tuple[str, ...] = ()
  console_count: int = 0
  text: str = ""
  seconds: float = 0.0

  @property
  def visible(self) -> bool:
    """Rendered (`ok`) and something visible on screen (not `blank`)."""
    return self.ok and not self.blank


def is_blank(png: bytes) -> bool:
  """True when every pixel of the PNG has the same colour."""
  from PIL import Image  # pillow comes with matplotlib, a core dependency
  with Image.open(io.BytesIO(png)) as img:
    extrema = img.convert("RGB").getextrema()
  return all(lo == hi for lo, hi in extrema)


def _descendants(root: int) -> list[int]:
  """Pids of every descendant of process `root` (Linux /proc)."""
  children: dict[int, list[int]] = {}
  for name in os.listdir("/proc"):
    if not name.isdigit():
      continue
    try:
      with open(f"/proc/{name}/stat", "rb") as f:
        stat = f.read()
    except OSError:
      continue
    ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
    children.setdefault(ppid, []).append(int(name))
  out, stack = [], [root]
  while stack:
    for c in children.get(stack.pop(), []):
      out.append(c)
      stack.append(c)
  return out


def _rss_mb(pid: int) -> float:
  with open(f"/proc/{pid}/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _is_renderer(pid: int) -> bool:
  with open(f"/proc/{pid}/cmdline", "rb") as f:
    return b"--type=renderer" in f.read()


class Renderer:
  """A long-lived headless Chromium rendering pages concurrently, each in a fresh context.

  Example:
    with Renderer(concurrency=2) as r:
      [res] = r.render([page_html(bundle, css, vendors)])
      res.ok, res.blank, len(res.screenshot)
  """

  def __init__(self, *, chromium: str | None = None, concurrency: int = 2,
               timeout_s: float = 10.0, settle_ms: int = 150, viewport: tuple[int, int] = VIEWPORT,
               js_heap_mb: int = 256, memory_mb: int = 1024, max_console_messages: int = 200,
               fail_on_network: bool = True, poll_s: float = 0.2):
    if concurrency < 1:
      raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if timeout_s <= 0 or settle_ms < 0:
      raise ValueError(f"need timeout_s > 0 and settle_ms >= 0, got {timeout_s}, {settle_ms}")
    try:
      import playwright.async_api  # noqa: F401
    except ImportError as e:
      raise ToolchainError("rendering needs playwright: `pip install 'playwright>=1.65,<1.66'` "
                           "(no `playwright install` needed; Chromium comes from Debian)") from e
    self.chromium = find_chromium(chromium)
    self.concurrency = int(concurrency)
    self.timeout_s = float(timeout_s)
    self.settle_ms = int(settle_ms)
    self.viewport = (int(viewport[0]), int(viewport[1]))
    self.js_heap_mb = int(js_heap_mb)
    self.memory_mb = int(memory_mb)
    self.max_console_messages = int(max_console_messages)
    self.fail_on_network = bool(fail_on_network)
    self.poll_s = float(poll_s)
    self.browser_restarts = 0
    self.renderer_kills = 0
    self._pw = None
    self._browser = None
    self._tmpdir: str | None = None
    self._closed = False
    self._launched = False
    self._loop = asyncio.new_event_loop()
    self._thread = threading.Thread(target=self._loop.run_forever, name="botjax-render",
                                    daemon=True)
    self._thread.start()
    self._sem = None
    self._launch_lock = None
    self._stop_watchdog = threading.Event()
    self._watchdog = threading.Thread(target=self._watch_memory, name="botjax-render-memory",
                                      daemon=True)
    self._watchdog.start()
    self._finalizer = weakref.finalize(self, Renderer._shutdown, self._loop, self._stop_watchdog)

  # ------------------------------------------------------------------ browser lifetime
  def _args(self) -> list[str]:
    return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-extensions",
            "--disable-default-apps", "--mute-audio", "--no-pings",
            "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--js-flags=--max-old-space-size={self.js_heap_mb}"]

  def _init_async(self) -> None:
    if self._sem is None:
      self._sem = asyncio.Semaphore(self.concurrency)
      self._launch_lock = asyncio.Lock()

  async def _ensure_browser(self):
    self._init_async()
    async with self._launch_lock:
      if self._browser is not None and self._browser.is_connected():
        return self._browser
      await self._kill_browser()
      from playwright.async_api import async_playwright
      if self._pw is None:
        self._pw = await async_playwright().start()
      self._tmpdir = tempfile.mkdtemp(prefix="botjax-chromium-")
      env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self._tmpdir,
             "TMPDIR": self._tmpdir}
      try:
        self._browser = await self._pw.chromium.launch(
            executable_path=self.chromium, headless=True, args=self._args(), env=env,
            downloads_path=self._tmpdir, timeout=60_000)
      except Exception as e:
        shutil.rmtree(self._tmpdir, ignore_errors=True)
        self._tmpdir = None
        if not self._launched:  # never worked here: a setup problem, say so
          raise ToolchainError(f"Chromium at {self.chromium} did not start under Playwright: "
                               f"{str(e).splitlines()[0] if str(e) else e!r}; install Debian's "
                               "`chromium` or point chromium= / BOTJAX_CHROMIUM at a working "
                               "Chromium") from e
        raise
      self._launched = True
      return self._browser

  def _browser_pids(self) -> list[int]:
    """Pids of this renderer's Chromium processes: the browser (our descendant whose TMPDIR is
    our directory; its zygote and renderers get a cleaned environment) and all its descendants."""
    if not self._tmpdir:
      return []
    marker = f"TMPDIR={self._tmpdir}".encode() + b"\0"
    pids: set[int] = set()
    for pid in _descendants(os.getpid()):
      if pid in pids:
        continue
      try:
        with open(f"/proc/{pid}/environ", "rb") as f:
          if marker in f.read():
            pids.add(pid)
            pids.update(_descendants(pid))
      except OSError:
        continue
    return sorted(pids)

  async def _kill_browser(self) -> None:
    browser, self._browser = self._browser, None
    if browser is not None:
      self.browser_restarts += 1
      # Kill the processes directly: a renderer stuck in a loop can stall a polite close.
      for pid in self._browser_pids():
        try:
          os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
          pass
      try:
        await asyncio.wait_for(browser.close(), 5)
      except Exception:  # noqa: BLE001 - the browser is already dead; nothing to report
        pass
    if self._tmpdir:
      shutil.rmtree(self._tmpdir, ignore_errors=True)
      self._tmpdir = None

  def _watch_memory(self) -> None:
    while not self._stop_watchdog.wait(self.poll_s):
      if self._browser is None:
        continue
      try:
        pids = self._browser_pids()
      except OSError:
        continue
      for pid in pids:
        try:
          if _is_renderer(pid) and _rss_mb(pid) > self.memory_mb:
            os.kill(pid, signal.SIGKILL)
            self.renderer_kills += 1
        except (OSError, ValueError):
          continue

  # ------------------------------------------------------------------ one item
  async def _render_one(self, html: str) -> RenderResult:
    self._init_async()
    async with self._sem:
      browser = await self._ensure_browser()
      t0 = time.monotonic()
      state = {"console": 0, "errors": [], "network": [], "crashed": False,
               "navigated": asyncio.Event()}
      context = None
      try:
        context = await browser.new_context(
            viewport={"width": self.viewport[0], "height": self.viewport[1]},
            offline=True, service_workers="block", accept_downloads=False,
            java_script_enabled=True, bypass_csp=False)
        await context.route("**/*", lambda route: self._block(route, state))
        await context.route_web_socket("**/*", lambda ws: self._block_ws(ws, state))
        page = await context.new_page()
        page.on("console", lambda msg: self._on_console(msg, state))
        page.on("pageerror", lambda err: self._note_error(state, f"page error: {err}"))
        page.on("crash", lambda _: state.__setitem__("crashed", True))
        result = await self._race(page, html, state)
      except Exception as e:  # noqa: BLE001 - a crashed page/browser is an item failure
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        if state["crashed"] or "crash" in msg.lower():
          msg = f"renderer crashed (out of memory or killed): {msg}"
        result = RenderResult(ok=False, error=msg[:500])
      finally:
        if context is not None:
          try:
            await asyncio.wait_for(context.close(), 5)
          except Exception:  # noqa: BLE001 - a hung renderer: restart the whole browser
            await self._kill_browser()
      return dataclasses.replace(result, console_errors=tuple(state["errors"]),
                                 console_count=state["console"],
                                 seconds=time.monotonic() - t0)

  async def _race(self, page, html: str, state) -> RenderResult:
    """Runs `_drive` under the time limit; a navigation attempt ends the item at once (an aborted
    navigation replaces the page with an error page, so the mount status would never arrive)."""
    drive = asyncio.ensure_future(self._drive(page, html, state))
    nav = asyncio.ensure_future(state["navigated"].wait())
    done, _ = await asyncio.wait({drive, nav}, timeout=self.timeout_s,
                                 return_when=asyncio.FIRST_COMPLETED)
    if drive in done:
      nav.cancel()
      return drive.result()
    for task in (drive, nav):
      task.cancel()
    await asyncio.gather(drive, nav, return_exceptions=True)
    if nav in done:
      return RenderResult(ok=False, error="network access blocked: navigation to "
                          + state["network"][-1].split(" ", 1)[-1])
    return RenderResult(ok=False, error=f"time limit of {self.timeout_s:g} s exceeded")

  async def _block(self, route, state) -> None:
    req = route.request
    if req.resource_type in _NETWORK_TYPES:
      state["network"].append(f"{req.resource_type} {req.url[:200]}")
    if req.is_navigation_request():
      state["navigated"].set()
    try:
      await route.abort("blockedbyclient")
    except Exception:  # noqa: BLE001 - the page may be gone already
      pass

  def _block_ws(self, ws, state) -> None:
    state["network"].append(f"websocket {ws.url[:200]}")
    asyncio.ensure_future(ws.close())

  def _note_error(self, state, text: str) -> None:
    if len(state["errors"]) < 20:
      state["errors"].append(text[:500])

  def _on_console(self, msg, state) -> None:
    state["console"] += 1
    if msg.type == "error":
      self._note_error(state, msg.text)

  async def _drive(self, page, html: str, state) -> RenderResult:
    await page.set_content(html, wait_until="load", timeout=self.timeout_s * 1000)
    await page.wait_for_function("window.__botjax && window.__botjax.state !== 'pending'",
                                 timeout=self.timeout_s * 1000, polling=25)
    if self.settle_ms:
      await page.wait_for_timeout(self.settle_ms)
    status = await page.evaluate("({state: window.__botjax.state, error: window.__botjax.error,"
                                 " network: window.__botjax.network,"
                                 " console: window.__botjax.console || 0,"
                                 " text: document.body ? document.body.innerText.slice(0, 2000)"
                                 " : ''})")
    state["console"] = max(state["console"], int(status["console"]))
    state["network"].extend(status["network"] or [])
    text = status["text"]
    png = await page.screenshot(type="png", timeout=self.timeout_s * 1000)
    blank = is_blank(png)
    error = None
    if status["state"] == "error":
      error = status["error"]
    elif self.fail_on_network and state["network"]:
      error = "network access blocked: " + "; ".join(state["network"][:3])
    elif state["console"] > self.max_console_messages:
      error = f"console flood: {state['console']} messages (limit {self.max_console_messages})"
    return RenderResult(ok=error is None, screenshot=png, blank=blank, error=error, text=text)

  async def _render_all(self, htmls: Sequence[str]) -> list[RenderResult]:
    results = list(await asyncio.gather(*(self._render_one(h) for h in htmls)))
    # An item failing only because another item's hang or crash took the browser down is retried.
    for i, r in enumerate(results):
      if not r.ok and r.error and ("Target page, context or browser has been closed" in r.error
                                   or "Browser has been closed" in r.error):
        results[i] = await self._render_one(htmls[i])
    return results

  # ------------------------------------------------------------------ public API
  def page(self, bundle: str, css: str = "", vendor_scripts: Sequence[str] = ()) -> str:
    """`page_html` with this renderer's console limit."""
    return page_html(bundle, css, vendor_scripts, max_console_messages=self.max_console_messages)

  def render(self, htmls: Sequence[str]) -> list[RenderResult]:
    """Renders every page (see `page_html`), `concurrency` at a time.

    Returns:
      One RenderResult per page, in order. Never raises for what the page does.
    """
    if self._closed:
      raise RuntimeError("this Renderer is closed")
    if not htmls:
      return []
    fut = asyncio.run_coroutine_threadsafe(self._render_all(list(htmls)), self._loop)
    return fut.result()

  async def _aclose(self) -> None:
    await self._kill_browser()
    self.browser_restarts = max(0, self.browser_restarts - 1)
    if self._pw is not None:
      await self._pw.stop()
      self._pw = None

  @staticmethod
  def _shutdown(loop: asyncio.AbstractEventLoop, stop: threading.Event) -> None:
    stop.set()
    loop.call_soon_threadsafe(loop.stop)

  def close(self) -> None:
    """Closes the browser, removes its directory and stops the worker thread."""
    if self._closed:
      return
    self._closed = True
    try:
      asyncio.run_coroutine_threadsafe(self._aclose(), self._loop).result(timeout=30)
    finally:
      self._finalizer()
      self._thread.join(timeout=5)

  def __enter__(self) -> Renderer:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
