"""Value checks shared by the model config dataclasses (types are checked by protocols.typed_config)."""
from __future__ import annotations

from protocols.typed_config import ConfigError


def require_positive(cfg: object, *names: str) -> None:
    """Raise ConfigError naming `model.<name>` when a listed field is set and below 1."""
    for name in names:
        value = getattr(cfg, name)
        if value is not None and value < 1:
            raise ConfigError(f"model.{name} must be >= 1, got {value}")
