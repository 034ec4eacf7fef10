"""gunicorn's entry points for the services' WSGI applications (``wsgi_app:keystone`` ...).

keystone and others read ``sys.argv`` with oslo.config when their application is built, and
refuse gunicorn's options: each application is imported here with a bare ``sys.argv``.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

MODULES = {
    "keystone": "keystone.wsgi.api",
    "placement": "placement.wsgi.api",
    "glance": "glance.wsgi.api",
    "neutron": "neutron.wsgi.api",
    "nova_api": "nova.wsgi.osapi_compute",
}


def __getattr__(name: str) -> Any:
    if name not in MODULES:
        raise AttributeError(name)
    sys.argv = sys.argv[:1]
    return importlib.import_module(MODULES[name]).application
