"""kernelbook: kernel-by-kernel inference profiling of Hugging Face models, as a book of notebooks."""
import sys as _sys

__version__ = "0.1.0"

# jsonschema (imported by nbformat, which plotly's renderers and papermill import) loads rfc3987_syntax when it
# is installed (jupyterlab's dependencies pull it in), and that builds 38 lark grammars at import: 1.4 s in the
# book runner and again in every chapter's kernel. Only its IRI formats use it, and no notebook is checked
# against them, so a process that imports kernelbook goes without it (one that imported it already keeps it).
_sys.modules.setdefault("rfc3987_syntax", None)
