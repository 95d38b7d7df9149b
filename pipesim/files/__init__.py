"""Files in: size-limited input reading, the TOML reader, and strict JSON (finite numbers
only). Output files are the application's (:mod:`application.outputs`)."""
