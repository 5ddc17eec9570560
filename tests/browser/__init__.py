"""The playground page in a real browser: Debian chromium driven by Playwright."""
