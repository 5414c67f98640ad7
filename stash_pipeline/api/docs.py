"""``/docs`` and ``/redoc`` without the internet: Swagger UI's and ReDoc's assets come from the
``fastapi-offline`` package, served by the app itself under ``/docs-assets``, not from a CDN."""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs-assets"


def install(app: FastAPI) -> None:
    """Serve the docs pages; ``app`` must be built with ``docs_url=None, redoc_url=None``."""
    app.mount(ASSETS, StaticFiles(directory=str(files("fastapi_offline") / "static")),
              name="docs-assets")
    title = f"{app.title} docs"

    @app.get("/docs", include_in_schema=False)
    def swagger() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=app.openapi_url, title=title,
                                   swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{ASSETS}/favicon.png")

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=app.openapi_url, title=title,
                              redoc_js_url=f"{ASSETS}/redoc.standalone.js",
                              redoc_favicon_url=f"{ASSETS}/favicon.png", with_google_fonts=False)
