"""The HTML report in a real headless browser: it loads offline without console errors, its
script runs to the end, and it paints a non-trivial page (the chart's colours included).

Needs Chromium (Debian: ``apt-get install chromium``). Without one the tests skip with that
hint on a developer machine, and FAIL when the CI environment variable is set: CI installs
the browser (ci/test.sh), so a missing one there is a broken setup, not a reason to skip.
``DISC_CHROMIUM=/path/to/chrome`` picks a specific binary.

Console messages come from Chromium's own log (``--enable-logging=stderr``), where each
``console.*`` call, uncaught exception and Content-Security-Policy violation is a
``CONSOLE`` line. The report page logs nothing, so any such line is an error; the tests on
deliberately broken pages prove this detection works.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
import report_samples as samples

from disc_core.report import Report, render_html
from disc_core.report.render_html import COMPILED_COLOR, FALLBACK_COLOR

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_HINT = "apt-get update && apt-get install -y chromium"
CONSOLE = re.compile(r"CONSOLE[(:]|Uncaught")
WINDOW = (1200, 900)


def find_browser() -> str | None:
    explicit = os.environ.get("DISC_CHROMIUM")
    if explicit:
        return explicit
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    return next((path for name in CANDIDATES if (path := shutil.which(name))), None)


@pytest.fixture(scope="module")
def browser() -> str:
    found = find_browser()
    if found is None:
        message = f"no Chromium found for the HTML report browser test; install it: {INSTALL_HINT}"
        if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
            pytest.fail(f"CI is set but {message} (ci/test.sh installs it when run as root)")
        pytest.skip(message)
    return found


def run_browser(browser: str, page: Path, tmp_path: Path, *mode: str) -> tuple[str, list[str]]:
    """(stdout, console lines) of one headless run on ``page``."""
    profile = tmp_path / f"profile-{mode[0].lstrip('-').split('=')[0]}"
    command = [
        browser, "--headless", "--no-sandbox", "--disable-gpu",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
        "--enable-logging=stderr", "--v=0", f"--window-size={WINDOW[0]},{WINDOW[1]}",
        *mode, page.resolve().as_uri(),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180,
                            cwd=tmp_path)
    assert result.returncode == 0, f"{command}\nexit {result.returncode}\n{result.stderr[-3000:]}"
    return result.stdout, [line for line in result.stderr.splitlines() if CONSOLE.search(line)]


def load_page(browser: str, page: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """The DOM after scripts ran, and console messages."""
    return run_browser(browser, page, tmp_path, "--dump-dom")


def screenshot(browser: str, page: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    png = tmp_path / f"{page.stem}.png"
    _, console = run_browser(browser, page, tmp_path, f"--screenshot={png}")
    return png, console


# ------------------------------------------------------------------ a tiny PNG decoder


def decode_png(data: bytes) -> tuple[int, int, list[bytes], int]:
    """(width, height, rows of pixels, bytes per pixel) of an 8-bit RGB/RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
    assert header is not None, "PNG without IHDR"
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, f"unexpected PNG format {header}"
    bpp = 3 if color == 2 else 4
    stride = width * bpp
    raw = zlib.decompress(b"".join(idat))
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + (left + prev[i]) // 2) & 255
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows, bpp


def colours(rows: list[bytes], bpp: int) -> set[bytes]:
    return {row[i:i + 3] for row in rows for i in range(0, len(row), bpp)}


def test_png_decoder_on_a_known_image():
    # 2x2 RGB: red, green / blue, white; rows filtered with None and Up.
    pixels = [b"\xff\x00\x00\x00\xff\x00", b"\x00\x00\xff\xff\xff\xff"]
    up = bytes((b - a) & 255 for a, b in zip(pixels[0], pixels[1]))
    raw = b"\x00" + pixels[0] + b"\x02" + up

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(
            ">I", zlib.crc32(kind + body))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    width, height, rows, bpp = decode_png(png)
    assert (width, height, bpp, rows) == (2, 2, 3, pixels)


# ------------------------------------------------------------------ the report page

PAGES = {
    "rich": lambda: Report.merge([samples.issue_example(), samples.tf_report(),
                                  samples.hostile()]),
    "empty": Report,
    "all_fallback": samples.all_fallback,
}


@pytest.mark.parametrize("name", sorted(PAGES))
def test_report_page_loads_without_console_errors(browser, tmp_path, name):
    page = tmp_path / f"{name}.html"
    page.write_text(render_html(PAGES[name]()), encoding="utf-8")
    dom, console = load_page(browser, page, tmp_path)
    assert console == [], "console messages:\n" + "\n".join(console)
    assert 'data-rendered="ok"' in dom, "the page's script did not run to its end"
    assert "<h1>DISC coverage report</h1>" in dom
    assert "<script>alert" not in dom  # the hostile op name stayed text


def test_report_page_screenshot_is_a_real_picture(browser, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(render_html(PAGES["rich"]()), encoding="utf-8")
    png, console = screenshot(browser, page, tmp_path)
    assert console == [], "console messages:\n" + "\n".join(console)
    data = png.read_bytes()
    assert len(data) > 10_000, f"screenshot is only {len(data)} bytes"
    width, height, rows, bpp = decode_png(data)
    assert (width, height) == WINDOW
    seen = colours(rows, bpp)
    assert len(seen) > 50, f"screenshot has {len(seen)} colours: blank page?"
    # The chart's bars are painted (crisp edges keep their exact colours).
    assert bytes.fromhex(COMPILED_COLOR[1:]) in seen
    assert bytes.fromhex(FALLBACK_COLOR[1:]) in seen


# ------------------------------------------------------------------ the detection works


def test_detection_catches_script_errors(browser, tmp_path):
    page = tmp_path / "broken.html"
    good = render_html(samples.torch_report())
    page.write_text(good.replace('"use strict";', '"use strict"; undefinedFunction();'))
    dom, console = load_page(browser, page, tmp_path)
    assert any("Uncaught ReferenceError: undefinedFunction" in line for line in console), console
    assert 'data-rendered="ok"' not in dom


def test_detection_catches_console_error_calls(browser, tmp_path):
    page = tmp_path / "noisy.html"
    page.write_text(render_html(Report()).replace('"use strict";',
                                                  '"use strict"; console.error("boom");'))
    dom, console = load_page(browser, page, tmp_path)
    assert any('"boom"' in line for line in console), console
    assert 'data-rendered="ok"' in dom


def test_external_resources_are_blocked_and_reported(browser, tmp_path):
    page = tmp_path / "external.html"
    page.write_text(render_html(Report()).replace(
        "<h1>", '<img src="https://example.invalid/x.png"><h1>', 1))
    _, console = load_page(browser, page, tmp_path)
    assert any("Content Security Policy" in line for line in console), console


def test_a_blank_screenshot_is_recognised(browser, tmp_path):
    page = tmp_path / "blank.html"
    page.write_text("<!DOCTYPE html><html><body style='background:#fff'></body></html>")
    png, _ = screenshot(browser, page, tmp_path)
    _, _, rows, bpp = decode_png(png.read_bytes())
    assert len(colours(rows, bpp)) == 1
