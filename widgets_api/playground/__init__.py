"""The playground: the reference page at ``/``, its static files, and the build kit.

- :mod:`~parkway.widgets_api.playground.page`: the page, its files and their headers;
- :mod:`~parkway.widgets_api.playground.overlay`: the build kit's template overlay;
- ``static/``: the browser files (HTML, CSS, JavaScript modules).
"""

from parkway.widgets_api.playground.overlay import (
    OverlayMerge,
    build_kit_overlay,
    entry_identity,
    merge_overlay,
)
from parkway.widgets_api.playground.page import page_routes

__all__ = [
    "OverlayMerge",
    "build_kit_overlay",
    "entry_identity",
    "merge_overlay",
    "page_routes",
]
