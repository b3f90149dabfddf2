"""Sphinx configuration for nbtune's documentation (``make docs``)."""

from __future__ import annotations

import importlib.util
from importlib.metadata import PackageNotFoundError, version

project = "nbtune"
author = "the nbtune developers"
copyright = "nbtune developers"
try:
    release = version("nbtune")
except PackageNotFoundError:  # docs built from a checkout without an install
    release = "0.0.0"
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
# Markdown pages are optional: use MyST when it is installed, plain reST otherwise.
if importlib.util.find_spec("myst_parser") is not None:
    extensions.append("myst_parser")
    source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
else:
    source_suffix = {".rst": "restructuredtext"}

root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []
html_static_path: list[str] = []
html_theme = "alabaster"
html_title = f"nbtune {release}"

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Optional back-ends are not installed where the docs are built.
autodoc_mock_imports = ["dask_cuda", "cuda", "pynvml", "optuna"]
napoleon_google_docstring = True
napoleon_numpy_docstring = True
nitpicky = False
