"""The ``pipesim`` command line: the one composition root of the project.

Sub-commands import the heavy parts (the engine, torch, matplotlib) lazily, inside the command
that needs them, so ``pipesim schedule ...`` starts fast and never imports torch.
"""
