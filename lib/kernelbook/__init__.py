"""kernelbook: kernel-by-kernel inference profiling of Hugging Face models, as a book of notebooks."""
__version__ = "0.1.0"
