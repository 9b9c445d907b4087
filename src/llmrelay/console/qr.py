"""The two-factor setup's QR code, drawn here as inline SVG (segno): the `otpauth://` link,
which carries the TOTP secret, never leaves the server for a QR service, and the page needs
no script and no image URL (the CSP allows neither from elsewhere)."""

from __future__ import annotations

import segno
from markupsafe import Markup


def totp_qr(otpauth_uri: str) -> Markup | None:
    """An `<svg>` of the link (black on white in both themes, with the quiet zone scanners
    need), or None for an empty link."""
    if not otpauth_uri:
        return None
    code = segno.make(otpauth_uri, error="m", micro=False)
    svg = code.svg_inline(
        scale=4, dark="#000", light="#fff", svgclass="qr", title="QR code of the link below"
    )
    return Markup(svg)  # segno's own markup; the link inside is escaped by segno
