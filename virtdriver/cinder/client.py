"""A small client of Cinder's block-storage API (v3), for a host without a compute service.

``requests`` (and keystoneauth, when ``OS_AUTH_URL`` is set) are imported on first use: the CLI's
cold start does not pay for them. Authentication: keystoneauth's usual ``OS_*`` variables
(``OS_AUTH_URL``, ``OS_USERNAME``, ``OS_PASSWORD``, ``OS_PROJECT_NAME``, ``OS_USER_DOMAIN_NAME``,
``OS_PROJECT_DOMAIN_NAME``); without ``OS_AUTH_URL``, Cinder's ``noauth`` strategy
(``X-Auth-Token: user:project`` from ``OS_AUTH_TOKEN``, else ``OS_USERNAME:OS_PROJECT_ID``,
else ``admin:admin``) against project-less URLs. Tokens and passwords never reach a message.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from virtdriver.errors import CinderError, InvalidRequest, show

MICROVERSION = "3.54"  # attachments API with ``mode``


class Cinder:
    """One Cinder endpoint (``URL`` such as ``http://127.0.0.1:8776/v3``)."""

    def __init__(self, url: str, *, timeout: float = 60.0) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidRequest(f"--cinder: {show(url)} is not an http(s) URL")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._session: Any = None
        self._headers: dict[str, str] = {}

    def _open(self) -> Any:
        try:
            return self._start()
        except ImportError as exc:
            raise CinderError(f"talking to Cinder needs {exc.name} (pip install "
                              "'virtdriver[cinder]')") from None

    def _start(self) -> Any:
        if self._session is None:
            if os.environ.get("OS_AUTH_URL"):
                from keystoneauth1 import session as ks_session
                from keystoneauth1.identity import v3

                env = os.environ.get
                auth = v3.Password(auth_url=env("OS_AUTH_URL"), username=env("OS_USERNAME"),
                                   password=env("OS_PASSWORD"),
                                   project_name=env("OS_PROJECT_NAME"),
                                   user_domain_name=env("OS_USER_DOMAIN_NAME", "Default"),
                                   project_domain_name=env("OS_PROJECT_DOMAIN_NAME", "Default"))
                self._session = ks_session.Session(auth=auth)
            else:
                import requests

                token = os.environ.get("OS_AUTH_TOKEN") or (
                    f"{os.environ.get('OS_USERNAME', 'admin')}:"
                    f"{os.environ.get('OS_PROJECT_ID', 'admin')}")
                self._session = requests.Session()
                self._headers = {"X-Auth-Token": token}
        return self._session

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """One API call; the decoded JSON answer (``None`` for an empty one)."""
        session = self._open()
        headers = dict(self._headers, **{"OpenStack-API-Version": f"volume {MICROVERSION}",
                                         "Accept": "application/json"})
        kwargs: dict[str, Any] = {"headers": headers, "timeout": self.timeout}
        if body is not None:
            kwargs["json"] = body
        if self._headers:  # requests
            kwargs["allow_redirects"] = False
        else:  # keystoneauth: errors are ours to report
            kwargs["raise_exc"] = False
        try:
            reply = session.request(f"{self.url}{path}", method, **kwargs) if not self._headers \
                else session.request(method, f"{self.url}{path}", **kwargs)
        except Exception as exc:  # connection refused, DNS, TLS: one line, no traceback
            raise CinderError(f"Cinder at {self.url} did not answer {method} {path}: "
                              f"{type(exc).__name__}") from None
        if reply.status_code >= 400:
            raise CinderError(f"Cinder refused {method} {path}: {reply.status_code} "
                              f"{_fault(reply)}", reply.status_code)
        return reply.json() if reply.content else None

    # ---- volumes and attachments ------------------------------------------------------------

    def volume(self, volume_id: str) -> dict[str, Any]:
        return self.call("GET", f"/volumes/{volume_id}")["volume"]

    def create_attachment(self, volume_id: str, connector: Mapping[str, Any],
                          mode: str) -> dict[str, Any]:
        """``POST /attachments`` with this host's connector; the whole record
        (``{"attachment": {...}}``). No ``instance_uuid``: deleting it then asks no nova."""
        return self.call("POST", "/attachments", {"attachment": {
            "volume_uuid": volume_id, "connector": dict(connector), "mode": mode}})

    def complete_attachment(self, attachment_id: str) -> None:
        self.call("POST", f"/attachments/{attachment_id}/action", {"os-complete": None})

    def delete_attachment(self, attachment_id: str, *, missing_ok: bool = False) -> None:
        try:
            self.call("DELETE", f"/attachments/{attachment_id}")
        except CinderError as exc:
            if not (missing_ok and exc.status == 404):
                raise

    def wait_volume(self, volume_id: str, statuses: tuple[str, ...],
                    seconds: float = 60.0) -> dict[str, Any]:
        """Poll until the volume's status is one of ``statuses`` (Cinder has no event to wait
        on); :class:`CinderError` on ``error*`` or when ``seconds`` ran out."""
        deadline = time.monotonic() + seconds
        while True:
            vol = self.volume(volume_id)
            if vol["status"] in statuses:
                return vol
            if vol["status"].startswith("error") or time.monotonic() > deadline:
                raise CinderError(f"volume {volume_id} is {vol['status']!r}, not "
                                  f"{' or '.join(statuses)}")
            time.sleep(0.2)


def _fault(reply: Any) -> str:
    try:
        body = reply.json()
        fault = next(iter(body.values())) if isinstance(body, dict) and body else {}
        return " ".join(str(fault.get("message", "")).split())[:300] or reply.reason
    except Exception:  # not JSON
        return str(reply.reason)
