"""The dashboard's templates (``templates/``) and browser assets (``static/``): data only, no code.

``app.api.routes.ui`` serves them. Everything the page needs is here, vendored and served by the app itself: the
page works offline and loads nothing from another host (its Content-Security-Policy says so too).
"""

from __future__ import annotations

from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
