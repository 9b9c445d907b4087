"""The console's own static files (CSS, JavaScript, the icon), read once from the package and
served from memory: an asset URL carries the hash of all of them (`?v=`), so a page always
loads the files it was rendered with and the browser may keep them for a year."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response

_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".json": "application/json",
}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


class StaticFiles:
    def __init__(self) -> None:
        folder = resources.files("llmrelay.console").joinpath("static")
        self.assets: dict[str, Asset] = {}
        digest = hashlib.sha256()
        for item in sorted(folder.iterdir(), key=lambda f: f.name):
            suffix = "." + item.name.rsplit(".", 1)[-1]
            if not item.is_file() or suffix not in _TYPES:
                continue
            body = item.read_bytes()
            tag = hashlib.sha256(body).hexdigest()[:16]
            self.assets[item.name] = Asset(body, _TYPES[suffix], f'"{tag}"')
            digest.update(item.name.encode() + body)
        self.version = digest.hexdigest()[:12]

    def url(self, name: str) -> str:
        return f"/static/{name}?v={self.version}"

    async def serve(self, request: Request) -> Response:
        asset = self.assets.get(request.path_params["name"])
        if asset is None:
            return Response("not found", 404, media_type="text/plain")
        if request.query_params.get("v") == self.version:
            cache = "public, max-age=31536000, immutable"
        else:
            cache = "public, max-age=0, must-revalidate"
        headers = {"cache-control": cache, "etag": asset.etag}
        if request.headers.get("if-none-match") == asset.etag:
            return Response(status_code=304, headers=headers)
        return Response(asset.body, media_type=asset.content_type, headers=headers)
