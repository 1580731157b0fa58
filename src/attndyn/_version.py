"""The package version: the one place it is written.

``pyproject.toml`` reads it (hatchling's dynamic version) and provenance records it. An
editable install keeps the metadata of the day it was installed, so provenance must not
ask ``importlib.metadata``: after a version bump without a reinstall it named the old
version (0.4.1 on 0.4.2 code).
"""

__version__ = "0.4.10"
