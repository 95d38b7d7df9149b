"""The prepared GPU check: one command a session with a GPU runs first (``run.sh``), its
preflight (:mod:`validation.gpu.preflight`) and its table (:mod:`validation.gpu.summary`)."""
