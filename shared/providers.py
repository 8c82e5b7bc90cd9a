"""Known model providers: which need an API key, and where their OpenAI-compatible endpoint is.

Any other provider name works too when the run names its `base_url`; it is then treated as a cloud
provider (a key is required) unless the url points at this machine.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import msgspec

BASELINE = "baseline"


class Provider(msgspec.Struct, frozen=True):
    base_url: str | None
    requires_key: bool


PROVIDERS: dict[str, Provider] = {
    BASELINE: Provider(base_url=None, requires_key=False),
    "openai": Provider(base_url="https://api.openai.com/v1", requires_key=True),
    "azure": Provider(base_url=None, requires_key=True),
    "anthropic": Provider(base_url="https://api.anthropic.com/v1/", requires_key=True),
    "openrouter": Provider(base_url="https://openrouter.ai/api/v1", requires_key=True),
    "groq": Provider(base_url="https://api.groq.com/openai/v1", requires_key=True),
    "mistral": Provider(base_url="https://api.mistral.ai/v1", requires_key=True),
    "together": Provider(base_url="https://api.together.xyz/v1", requires_key=True),
    "deepseek": Provider(base_url="https://api.deepseek.com/v1", requires_key=True),
    "gemini": Provider(
        base_url="https://generativelanguage.googleapis.com/v1beta/openai/", requires_key=True
    ),
    "ollama": Provider(base_url="http://localhost:11434/v1", requires_key=False),
    "vllm": Provider(base_url="http://localhost:8000/v1", requires_key=False),
    "lmstudio": Provider(base_url="http://localhost:1234/v1", requires_key=False),
    "llamacpp": Provider(base_url="http://localhost:8080/v1", requires_key=False),
}

_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


def resolve_base_url(provider: str, base_url: str | None) -> str | None:
    """The endpoint a run will call: its own base_url, else the provider's default."""
    if base_url:
        return base_url
    known = PROVIDERS.get(provider.lower())
    return known.base_url if known else None


def requires_key(provider: str, base_url: str | None) -> bool:
    known = PROVIDERS.get(provider.lower())
    if known is not None:
        return known.requires_key
    host = urlsplit(base_url or "").hostname or ""
    return host not in _LOCAL_HOSTS
