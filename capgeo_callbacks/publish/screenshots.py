"""Screenshots of a run's TensorBoard dashboard as a user sees it: a real ``tensorboard`` server at its default
settings and headless Chromium.

    capgeo dashboard RUN_DIR OUT     # OUT/custom_scalars.png, images.png, text.png

Needs ``tensorboard`` (a dependency) and Chromium (Debian: ``apt-get install chromium``). The pages are
TensorBoard's own, with no setting changed (outlier clipping on, linear step axis, default smoothing).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

__all__ = ["PAGES", "main", "screenshots"]

PAGES = ("custom_scalars", "images", "text")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(url: str, seconds: float = 60) -> None:
    """Until ``url`` answers (the server is up and has read the logs), or fail."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200 and b"capgeo" in response.read():
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"TensorBoard did not serve {url} within {seconds:.0f} s")


def screenshots(run_dir: Path, out: Path, width: int = 1600, height: int = 1800) -> list[Path]:
    """Serve ``run_dir`` with TensorBoard and save a PNG of each of :data:`PAGES` into ``out``; the paths.

    Raises:
        SystemExit: when no Chromium is found, or TensorBoard does not serve the run within a minute.
    """
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        raise SystemExit("no Chromium found: apt-get install chromium")
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(run_dir), "--port",
                               str(port), "--host", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    made = []
    try:
        # the custom-scalars layout is what names capgeo: once it is served, the run's logs have been read
        wait_for(f"http://127.0.0.1:{port}/data/plugin/custom_scalars/layout")
        for page in PAGES:
            path = out / f"{page}.png"
            with tempfile.TemporaryDirectory() as profile:
                subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                f"--window-size={width},{height}", "--virtual-time-budget=30000",
                                f"--screenshot={path}", f"http://127.0.0.1:{port}/#{page}"],
                               check=True, capture_output=True, timeout=180)
            made.append(path)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return made


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a run's log folder (or a folder of runs)")
    parser.add_argument("out", type=Path, help="where the PNG files go")
    args = parser.parse_args(argv)
    for path in screenshots(args.run_dir, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
