"""``GET /openapi.json``: an OpenAPI 3.1 description of every route the app serves.

The routes' entries are in :mod:`parkway.transport.openapi._paths` (one
:class:`~parkway.transport.openapi._build.Operation` per route and method); the document
is built from them by :mod:`parkway.transport.openapi._build`. It depends on the
settings only through which optional routes exist (an entry's ``when``: the demo OAuth
provider, ``/metrics``), so it is built once per such variant, on its first request,
and served as bytes: the route is public and cheap. An app a host application mounts
under a prefix (``/pw``) adds a ``servers`` entry with that path, so the document's
paths stay the app's own and clients find them under the prefix.
"""

from parkway.transport.openapi._document import openapi_document, openapi_json

__all__ = [
    "openapi_document",
    "openapi_json",
]
