"""The protocols package stands on its own: its errors are its own, and importing every one
of its modules brings in nothing of the gateway (the translators are used without the
request path)."""

import pkgutil
import subprocess
import sys

import pytest

import llmrelay.protocols
from llmrelay.gateway import errors as gateway_errors
from llmrelay.protocols import openai as wire
from llmrelay.protocols.errors import InvalidRequest, ProtocolError, TranslationError
from llmrelay.protocols.generation import check_generate
from llmrelay.protocols.translation import TranslationError as ReExported


def test_importing_every_protocols_module_imports_no_gateway_module() -> None:
    modules = sorted(m.name for m in pkgutil.iter_modules(llmrelay.protocols.__path__))
    assert "errors" in modules and "responses_chat" in modules
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module('llmrelay.protocols.' + name)\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('llmrelay.gateway'))\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr


def test_the_gateway_tree_grows_from_the_protocols_root() -> None:
    # One `except GatewayError` in the gateway catches what a protocol check raised.
    assert gateway_errors.GatewayError is ProtocolError
    assert gateway_errors.InvalidRequest is InvalidRequest
    assert issubclass(gateway_errors.AuthenticationFailed, ProtocolError)
    assert ReExported is TranslationError


def test_a_protocol_check_raises_its_own_error_rendered_in_openai_shape() -> None:
    with pytest.raises(gateway_errors.GatewayError) as caught:
        check_generate({"model": "m", "prompt": "hi", "colour": "red"})
    assert isinstance(caught.value, InvalidRequest)
    body = wire.error_payload(caught.value)
    assert body == {
        "message": body["message"],
        "type": "invalid_request_error",
        "code": "unknown_parameter",
        "param": "colour",
    }
    assert "'colour'" in body["message"]
