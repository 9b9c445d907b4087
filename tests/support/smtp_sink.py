"""A real SMTP server on loopback for tests (aiosmtpd, in its own thread), keeping every message
it accepted. It can offer STARTTLS (a certificate from tests/support/tls.py), require a sign-in
(only over TLS, as real servers do), refuse the next messages for now (451) and refuse
recipients for good (550)."""

from __future__ import annotations

import email
import email.policy
import ssl
import threading
import time
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any
from urllib.parse import quote

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from tests.support.ports import free_port
from tests.support.tls import Certificates


@dataclass(frozen=True)
class Received:
    sender: str
    recipients: list[str]
    message: EmailMessage
    #: The connection was encrypted (STARTTLS) when the message was sent.
    encrypted: bool
    #: Who signed in, if anyone.
    login: str | None

    @property
    def to(self) -> str:
        return str(self.message["To"])

    @property
    def subject(self) -> str:
        return str(self.message["Subject"])

    def text(self) -> str:
        part = self.message.get_body(preferencelist=("plain",))
        assert part is not None, "the message has no text part"
        return str(part.get_content())

    def html(self) -> str | None:
        part = self.message.get_body(preferencelist=("html",))
        return None if part is None else str(part.get_content())


@dataclass
class SmtpSink:
    certificates: Certificates | None = None
    #: TLS from the first byte (smtps://) instead of offering STARTTLS.
    implicit_tls: bool = False
    #: (user, password) the server requires before it takes mail.
    credentials: tuple[str, str] | None = None
    #: Recipients refused for good (550).
    unknown: set[str] = field(default_factory=set)
    port: int = field(default_factory=free_port)
    received: list[Received] = field(default_factory=list)
    _refusals: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _controller: Controller | None = None

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, *, user: str | None = None, password: str | None = None) -> str:
        if user is None and self.credentials is not None:
            user, password = self.credentials
        auth = f"{quote(user, safe='')}:{quote(password or '', safe='')}@" if user else ""
        scheme = "smtps" if self.implicit_tls else "smtp"
        return f"{scheme}://{auth}{self.host_port}"

    def refuse_next(self, count: int) -> None:
        """The next `count` messages are answered 451 (try again later)."""
        with self._lock:
            self._refusals = count

    def start(self) -> SmtpSink:
        kwargs: dict[str, Any] = {}
        if self.certificates is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(self.certificates.cert_file, self.certificates.key_file)
            kwargs["ssl_context" if self.implicit_tls else "tls_context"] = context
        if self.credentials is not None:
            kwargs["authenticator"] = self._authenticate
            kwargs["auth_required"] = True
        self._controller = Controller(
            _Handler(self), hostname="127.0.0.1", port=self.port, **kwargs
        )
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def messages_to(self, address: str) -> list[Received]:
        with self._lock:
            return [m for m in self.received if address in m.recipients]

    def wait_for(self, address: str, count: int = 1, timeout_s: float = 15.0) -> list[Received]:
        """The messages to `address`, once there are `count` of them."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.messages_to(address)
            if len(found) >= count:
                return found
            assert time.monotonic() < deadline, (
                f"{len(found)} of {count} mails to {address} within {timeout_s} s "
                f"(received: {[m.recipients for m in self.received]})"
            )
            time.sleep(0.05)

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        if not isinstance(data, LoginPassword) or self.credentials is None:
            return AuthResult(success=False, handled=False)
        user, password = self.credentials
        ok = data.login.decode() == user and data.password.decode() == password
        return AuthResult(success=ok, handled=False, auth_data=data.login.decode() if ok else None)


class _Handler:
    def __init__(self, sink: SmtpSink) -> None:
        self.sink = sink

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        if address in self.sink.unknown:
            return "550 5.1.1 no such mailbox here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        sink = self.sink
        with sink._lock:
            if sink._refusals > 0:
                sink._refusals -= 1
                return "451 4.3.0 not now: try again later"
            content = envelope.original_content or envelope.content or b""
            assert isinstance(content, bytes)
            message = email.message_from_bytes(content, policy=email.policy.default)
            assert isinstance(message, EmailMessage)
            login = session.auth_data
            sink.received.append(
                Received(
                    sender=str(envelope.mail_from),
                    recipients=list(envelope.rcpt_tos),
                    message=message,
                    encrypted=session.ssl is not None or sink.implicit_tls,
                    login=login if isinstance(login, str) else None,
                )
            )
        return "250 OK: queued"
