"""A software WebAuthn authenticator for tests: it answers the options the admin API gives
(registration with 'none' attestation, sign-in assertions) the way a browser and a security
key together would, with an ES256 (P-256) key made by `cryptography`. Knobs make the bad
answers a test needs: another origin, another RP id, a counter that goes backwards."""

from __future__ import annotations

import base64
import hashlib
import secrets
import struct
from dataclasses import dataclass, field
from typing import Any

import cbor2
import orjson
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

_UP, _UV, _AT = 0x01, 0x04, 0x40


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Credential:
    """One passkey the authenticator holds (discoverable: it keeps its user handle)."""

    id: bytes
    key: ec.EllipticCurvePrivateKey
    rp_id: str
    user_handle: bytes
    sign_count: int = 0

    @property
    def id_text(self) -> str:
        return b64url(self.id)

    def cose_key(self) -> bytes:
        numbers = self.key.public_key().public_numbers()
        return cbor2.dumps(
            {
                1: 2,  # kty: EC2
                3: -7,  # alg: ES256
                -1: 1,  # crv: P-256
                -2: numbers.x.to_bytes(32, "big"),
                -3: numbers.y.to_bytes(32, "big"),
            }
        )


@dataclass
class SoftAuthenticator:
    """Holds credentials for one origin (`https://host[:port]` or `http://localhost:port`)."""

    origin: str
    credentials: list[Credential] = field(default_factory=list)

    def _client_data(self, kind: str, challenge: str, origin: str | None) -> bytes:
        return orjson.dumps(
            {
                "type": kind,
                "challenge": challenge,
                "origin": origin or self.origin,
                "crossOrigin": False,
            }
        )

    def create(
        self, options: dict[str, Any], *, origin: str | None = None, rp_id: str | None = None
    ) -> dict[str, Any]:
        """The answer of navigator.credentials.create() to `options` (its JSON form)."""
        rp = rp_id or str(options["rp"]["id"])
        credential = Credential(
            id=secrets.token_bytes(32),
            key=ec.generate_private_key(ec.SECP256R1()),
            rp_id=rp,
            user_handle=unb64url(str(options["user"]["id"])),
        )
        attested = (
            bytes(16)  # AAGUID: none
            + struct.pack(">H", len(credential.id))
            + credential.id
            + credential.cose_key()
        )
        auth_data = (
            hashlib.sha256(rp.encode()).digest()
            + bytes([_UP | _UV | _AT])
            + struct.pack(">I", credential.sign_count)
            + attested
        )
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        client_data = self._client_data("webauthn.create", str(options["challenge"]), origin)
        self.credentials.append(credential)
        return {
            "id": credential.id_text,
            "rawId": credential.id_text,
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(client_data),
                "attestationObject": b64url(attestation),
                "transports": ["internal"],
            },
            "clientExtensionResults": {},
            "authenticatorAttachment": "platform",
        }

    def get(
        self,
        options: dict[str, Any],
        credential: Credential | None = None,
        *,
        origin: str | None = None,
        user_verified: bool = True,
        sign_count: int | None = None,
    ) -> dict[str, Any]:
        """The answer of navigator.credentials.get() to `options`, by `credential` (default:
        the last one made); its counter moves on by one unless `sign_count` is given."""
        used = credential or self.credentials[-1]
        used.sign_count = used.sign_count + 1 if sign_count is None else sign_count
        flags = _UP | (_UV if user_verified else 0)
        auth_data = (
            hashlib.sha256(used.rp_id.encode()).digest()
            + bytes([flags])
            + struct.pack(">I", used.sign_count)
        )
        client_data = self._client_data("webauthn.get", str(options["challenge"]), origin)
        signed = auth_data + hashlib.sha256(client_data).digest()
        signature = used.key.sign(signed, ec.ECDSA(hashes.SHA256()))
        return {
            "id": used.id_text,
            "rawId": used.id_text,
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(client_data),
                "authenticatorData": b64url(auth_data),
                "signature": b64url(signature),
                "userHandle": b64url(used.user_handle),
            },
            "clientExtensionResults": {},
            "authenticatorAttachment": "platform",
        }
