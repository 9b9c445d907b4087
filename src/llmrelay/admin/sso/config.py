"""How single sign-on is set (LLMRELAY_OIDC_*), read once from the settings: the provider,
the client, and which of the provider's groups grant which role where."""

from __future__ import annotations

from dataclasses import dataclass

from llmrelay.admin.roles import Role
from llmrelay.settings import Settings

#: A group's grant: (tenant slug or None for the default tenant, role).
Grant = tuple[str | None, Role]


class SsoConfigError(ValueError):
    """A mapping that names no role (refused at start-up, with the setting's name)."""


def parse_role_map(text: str) -> dict[str, list[Grant]]:
    """`group=role` or `group=tenant-slug:role`, comma-separated; a group may grant several.
    `platform_admin` as the role makes the account a platform admin."""
    found: dict[str, list[Grant]] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        group, sep, target = item.partition("=")
        tenant, _, role = target.rpartition(":")
        if not sep or not group.strip() or not role.strip():
            raise SsoConfigError(
                f"LLMRELAY_OIDC_ROLE_MAP: {item!r} is not group=role or group=tenant:role"
            )
        try:
            granted = Role(role.strip())
        except ValueError:
            roles = ", ".join(r.value for r in Role)
            raise SsoConfigError(
                f"LLMRELAY_OIDC_ROLE_MAP: {role.strip()!r} is not a role ({roles})"
            ) from None
        found.setdefault(group.strip(), []).append((tenant.strip() or None, granted))
    return found


@dataclass(frozen=True, slots=True)
class SsoConfig:
    issuer: str
    client_id: str
    client_secret: str | None
    scopes: tuple[str, ...]
    #: The ID token claim that lists the person's groups.
    groups_claim: str
    role_map: dict[str, list[Grant]]
    #: The role in the default tenant of someone none of whose groups is mapped (None: such
    #: a person is refused).
    default_role: Role | None
    #: What the sign-in button says ("Sign in with NAME").
    name: str
    #: Only addresses of these domains may sign in (empty: any the provider vouches for).
    allowed_domains: tuple[str, ...]

    @classmethod
    def from_settings(cls, settings: Settings) -> SsoConfig | None:
        if not settings.oidc_issuer or not settings.oidc_client_id:
            return None
        default = settings.oidc_default_role
        return cls(
            issuer=settings.oidc_issuer.rstrip("/"),
            client_id=settings.oidc_client_id,
            client_secret=settings.oidc_client_secret,
            scopes=tuple(dict.fromkeys(("openid", *settings.oidc_scopes.split()))),
            groups_claim=settings.oidc_groups_claim,
            role_map=parse_role_map(settings.oidc_role_map),
            default_role=Role(default) if default else None,
            name=settings.oidc_name,
            allowed_domains=tuple(
                d.strip().lower().lstrip("@")
                for d in settings.oidc_allowed_domains.split(",")
                if d.strip()
            ),
        )
