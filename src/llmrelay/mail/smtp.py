"""Delivery over SMTP with the standard library's smtplib, in a worker thread (one mail per
connection: mails are few, and a fresh connection never inherits a broken one's state).

`smtp://` connects in the clear and upgrades with STARTTLS when the server offers it (or must,
with LLMRELAY_SMTP_STARTTLS=required); `smtps://` speaks TLS from the first byte. The
server's certificate is always verified (LLMRELAY_SMTP_CA_FILE names a private CA). A
password is never sent over an unencrypted connection except to a loopback address.

Every failure is a `SendFailed`: `permanent` when the server refused the recipient or the
message for good (5xx): retrying cannot help. Anything else (a 4xx, a refused connection, a
timeout, a failed sign-in) may pass: the job retries it.
"""

from __future__ import annotations

import asyncio
import smtplib
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, parseaddr
from pathlib import Path
from urllib.parse import unquote, urlsplit

from llmrelay.settings import Settings, SmtpStartTls

_LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


class SendFailed(Exception):
    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


@dataclass(frozen=True, slots=True)
class SmtpConfig:
    host: str
    port: int
    implicit_tls: bool
    username: str | None
    password: str | None
    starttls: SmtpStartTls
    ca_file: Path | None
    timeout_s: float
    sender: str

    @classmethod
    def from_settings(cls, settings: Settings) -> SmtpConfig | None:
        """None when no SMTP server is configured (LLMRELAY_SMTP_URL unset)."""
        if settings.smtp_url is None:
            return None
        url = urlsplit(settings.smtp_url)
        implicit = url.scheme == "smtps"
        return cls(
            host=url.hostname or "localhost",
            port=url.port or (465 if implicit else 587),
            implicit_tls=implicit,
            username=unquote(url.username) if url.username else None,
            password=unquote(url.password) if url.password else None,
            starttls=settings.smtp_starttls,
            ca_file=settings.smtp_ca_file,
            timeout_s=settings.smtp_timeout_s,
            sender=settings.mail_from,
        )

    def tls_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)


def build_message(
    config: SmtpConfig, message_id: str, to: str, subject: str, text: str, html: str | None
) -> EmailMessage:
    """The MIME message: plain text, with an HTML alternative when there is one. Its
    Message-ID is the outbox id, so a mail sent twice (a worker died between the server's
    acceptance and the outbox's update) is recognisably one mail."""
    message = EmailMessage()
    message["From"] = config.sender
    message["To"] = to
    message["Subject"] = " ".join(subject.split())  # never a second header
    message["Date"] = formatdate(usegmt=True)
    domain = parseaddr(config.sender)[1].rpartition("@")[2] or "llmrelay.invalid"
    message["Message-ID"] = f"<{message_id}@{domain}>"
    message["Auto-Submitted"] = "auto-generated"
    message.set_content(text)
    if html is not None:
        message.add_alternative(html, subtype="html")
    return message


def sender_address(config: SmtpConfig) -> str:
    """The envelope sender: the address part of LLMRELAY_MAIL_FROM."""
    return parseaddr(config.sender)[1] or config.sender


async def send(config: SmtpConfig, message: EmailMessage) -> None:
    """Deliver `message` to the server (raises SendFailed)."""
    await asyncio.to_thread(_send_blocking, config, message)


def _send_blocking(config: SmtpConfig, message: EmailMessage) -> None:
    try:
        _deliver(config, message)
    except SendFailed:
        raise
    except smtplib.SMTPRecipientsRefused as exc:
        codes = [code for code, _ in exc.recipients.values()]
        detail = "; ".join(f"{code} {text!r}" for code, text in exc.recipients.values())
        raise SendFailed(
            f"the server refused the recipient: {detail}", permanent=min(codes) >= 500
        ) from None
    except smtplib.SMTPDataError as exc:
        raise SendFailed(
            f"the server refused the message: {exc.smtp_code} {exc.smtp_error!r}",
            permanent=exc.smtp_code >= 500,
        ) from None
    except smtplib.SMTPResponseException as exc:
        raise SendFailed(f"the server answered {exc.smtp_code} {exc.smtp_error!r}") from None
    except (smtplib.SMTPException, OSError) as exc:  # ssl.SSLError is an OSError
        raise SendFailed(f"{type(exc).__name__}: {exc}") from None


def _deliver(config: SmtpConfig, message: EmailMessage) -> None:
    client: smtplib.SMTP
    if config.implicit_tls:
        client = smtplib.SMTP_SSL(
            config.host, config.port, timeout=config.timeout_s, context=config.tls_context()
        )
    else:
        client = smtplib.SMTP(config.host, config.port, timeout=config.timeout_s)
    with client:
        client.ehlo()
        encrypted = config.implicit_tls
        if not encrypted and config.starttls != "off":
            if client.has_extn("starttls"):
                client.starttls(context=config.tls_context())
                client.ehlo()
                encrypted = True
            elif config.starttls == "required":
                raise SendFailed(
                    f"{config.host}:{config.port} does not offer STARTTLS and "
                    "LLMRELAY_SMTP_STARTTLS=required"
                )
        if config.username is not None:
            if not encrypted and config.host not in _LOOPBACK:
                raise SendFailed(
                    "refusing to send the SMTP password over an unencrypted connection: use "
                    "smtps:// or a server that offers STARTTLS"
                )
            client.login(config.username, config.password or "")
        client.send_message(message, from_addr=sender_address(config), to_addrs=[message["To"]])
