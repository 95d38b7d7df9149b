"""Files in and out: size-limited input reading, the TOML reader, atomic output writers and
strict JSON (finite numbers only)."""
