"""The web pages: server-rendered HTML for people (leaderboards, submissions, batches).

`router` holds the page routes; `mount_static` serves the CSS and the two small JavaScript files shipped in
this package (no CDN, no build step). Pages are readable without JavaScript; every page carries a
Content-Security-Policy that allows scripts only from this origin, so a candidate's source, a model name or
metadata full of HTML and script is shown as text and never runs.
"""

from __future__ import annotations

from service.web.routes import mount_static, router

__all__ = ["router", "mount_static"]
