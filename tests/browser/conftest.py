"""Browser-test fixtures: a real JupyterLab server and Debian's chromium driven by Playwright.

Reusable by anyone writing browser tests:

* :func:`start_lab_server` / the ``lab_server`` fixture start
  ``jupyter lab`` from this venv on 127.0.0.1, a free port, a random token and
  a temporary root dir, with the nbtune server extension enabled and the
  freshly built lab extension (``nbtune/labextension``, see ``make labext``)
  linked into its private Jupyter data dir; the server is stopped by its own PID.
  :func:`start_notebook_server` / ``notebook_server`` do the same for
  ``jupyter notebook`` (Notebook 7, a JupyterLab-based app with the same
  settings and extension machinery); both go through :func:`start_jupyter_server`.
* ``browser`` launches ``/usr/bin/chromium`` (never Playwright's own browser
  download, which this machine cannot fetch) headless and offline-quiet;
  ``page`` gives each test a fresh context and saves a screenshot of it under
  ``tests/browser/artifacts/`` when the test ends, pass or fail.

Every test here is marked ``browser`` and skips with the reason when chromium,
Playwright or the built extension is missing.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
BUILT_LABEXT = REPO / "nbtune" / "labextension" / "package.json"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
    "--disable-dev-shm-usage",
]
#: User settings for the test server: no modal may stand between a test and the page.
LAB_SETTINGS = {
    # no "get Jupyter news?" toast (and no fetch of the news feed)
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false"},
    # open a notebook with its kernelspec's kernel instead of asking "Select Kernel"
    # ... and render every cell, not only those in view: a test reads every output's view
    "@jupyterlab/notebook-extension:tracker": {"autoStartDefaultKernel": True,
                                               "windowingMode": "none"},
}
#: JupyterLab on 2 busy CI cores can take a while to answer its first request.
STARTUP_TIMEOUT = 60.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test in this folder ``browser`` and skip them all, with the reason, if
    something they need is missing."""
    here = Path(__file__).resolve().parent
    reason = _missing_prerequisite()
    for item in items:
        if here in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.browser)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


def _missing_prerequisite() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing: run `make sysdeps` (apt-get install chromium)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is not installed: pip install -e '.[dev]'"
    if not (Path(sys.prefix) / "bin" / "jupyter-lab").exists():
        return "jupyterlab is not installed in this venv: pip install -e '.[dev]'"
    if not BUILT_LABEXT.exists():
        return f"the lab extension is not built ({BUILT_LABEXT} missing): run `make labext`"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: What differs between the JupyterLab-based apps: the executable, the traitlets class
#: that takes the settings/workspaces dirs, the landing page, and app-only flags.
APPS: dict[str, dict[str, object]] = {
    "lab": {"exe": "jupyter-lab", "cls": "LabApp", "home": "lab",
            "flags": ["--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]},
    "notebook": {"exe": "jupyter-notebook", "cls": "JupyterNotebookApp", "home": "tree",
                 "flags": []},
}


def app_executable(app: str) -> Path:
    return Path(sys.prefix) / "bin" / str(APPS[app]["exe"])


@dataclass
class LabServer:
    """A running ``jupyter lab`` (or ``jupyter notebook``, ``app="notebook"``);
    ``url(path)`` adds the token so a browser is logged in."""

    root_dir: Path
    port: int
    token: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    app: str = "lab"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def url(self, path: str | None = None) -> str:
        """``path`` under the server (default: the app's landing page), with the token."""
        path = str(APPS[self.app]["home"]) if path is None else path
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}{path.lstrip('/')}{sep}token={self.token}"

    def api(self, path: str) -> dict:
        """GET a JSON endpoint with the token header (what the lab frontend does)."""
        req = urllib.request.Request(self.base_url + path.lstrip("/"),
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM this server's own process group (it started one), then SIGKILL if it lingers."""
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)


def start_lab_server(root_dir: Path, *, env: dict[str, str] | None = None,
                     extra_args: list[str] | None = None) -> LabServer:
    """Start ``jupyter lab`` serving ``root_dir`` (see :func:`start_jupyter_server`)."""
    return start_jupyter_server("lab", root_dir, env=env, extra_args=extra_args)


def start_notebook_server(root_dir: Path, *, env: dict[str, str] | None = None,
                          extra_args: list[str] | None = None) -> LabServer:
    """Start ``jupyter notebook`` (Notebook 7) serving ``root_dir``."""
    return start_jupyter_server("notebook", root_dir, env=env, extra_args=extra_args)


def start_jupyter_server(app: str, root_dir: Path, *, env: dict[str, str] | None = None,
                         extra_args: list[str] | None = None) -> LabServer:
    """Start ``jupyter <app>`` serving ``root_dir``; returns once ``/api/status`` answers.

    Jupyter's config, data and runtime dirs and Lab's settings/workspaces live
    under ``root_dir/.jupyter-test`` so no user setting or saved layout leaks
    in. ``env`` is added to the server's environment (e.g. ``NBTUNE_STORE``);
    the kernels it starts inherit it.
    """
    root_dir = Path(root_dir).resolve()
    home = root_dir / ".jupyter-test"
    for sub in ("config", "data", "runtime", "settings", "workspaces"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    (home / "config" / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"nbtune.server": True}}})
    )
    for plugin, values in LAB_SETTINGS.items():
        pkg, name = plugin.rsplit(":", 1)
        (home / "settings" / pkg).mkdir(parents=True, exist_ok=True)
        (home / "settings" / pkg / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
    # The freshly built extension, on JUPYTER_PATH: Lab looks there before the venv's
    # share/jupyter, so a stale copy an earlier `pip install -e` left there is not used.
    labext = home / "path" / "labextensions" / "nbtune"
    if not labext.exists():
        labext.parent.mkdir(parents=True, exist_ok=True)
        labext.symlink_to(BUILT_LABEXT.parent, target_is_directory=True)
    port, token = free_port(), secrets.token_hex(16)
    full_env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTER_PATH": str(home / "path"),
        "JUPYTER_PLATFORM_DIRS": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH"))
                                      if p),
        **(env or {}),
    }
    if app not in APPS:
        raise ValueError(f"unknown Jupyter app {app!r}; choose one of {sorted(APPS)}")
    cls = APPS[app]["cls"]
    cmd = [
        str(app_executable(app)), "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}",
        f"--{cls}.user_settings_dir={home / 'settings'}",
        f"--{cls}.workspaces_dir={home / 'workspaces'}",
        *APPS[app]["flags"],  # type: ignore[misc]
        *(["--allow-root"] if os.geteuid() == 0 else []),  # CI runs as root
        *(extra_args or []),
    ]
    log_path = home / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=root_dir, env=full_env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    server = LabServer(root_dir, port, token, proc, log_path, env or {}, app)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter {app} exited with {proc.returncode}:\n{server.log()}")
        try:
            server.api("api/status")
            return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(
                    f"jupyter {app} did not answer within {STARTUP_TIMEOUT}s:\n{server.log()}"
                ) from None
            time.sleep(0.25)


@pytest.fixture(scope="module")
def lab_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The root dir of the module's server; tests put notebooks and stores in it."""
    return tmp_path_factory.mktemp("lab")


@pytest.fixture(scope="module")
def lab_env() -> dict[str, str]:
    """Extra environment for the module's server; override in a test module to set it."""
    return {}


@pytest.fixture(scope="module")
def lab_server(lab_root: Path, lab_env: dict[str, str]) -> Iterator[LabServer]:
    server = start_lab_server(lab_root, env=lab_env)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def notebook_server(lab_root: Path, lab_env: dict[str, str]) -> Iterator[LabServer]:
    """``jupyter notebook`` (Notebook 7) on the module's root dir and environment."""
    if not app_executable("notebook").exists():
        pytest.skip("notebook (Notebook 7) is not installed in this venv: pip install -e '.[dev]'")
    server = start_notebook_server(lab_root, env=lab_env)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Debian's chromium, headless, with a fresh profile dir; one per test module.

    Not per session: Playwright's sync API keeps an asyncio loop running while it
    is open, which would break later asyncio-based tests (e.g. tests/server).
    """
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1400, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser: object, request: pytest.FixtureRequest) -> Iterator[object]:
    """A new tab; a screenshot of it is saved under tests/browser/artifacts/ at the end."""
    tab = browser.new_page()  # type: ignore[attr-defined]
    tab.set_default_timeout(60_000)
    try:
        yield tab
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        name = request.node.nodeid.split("::")[-1].replace("/", "_").replace("[", "-").rstrip("]")
        try:
            tab.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        finally:
            tab.close()
