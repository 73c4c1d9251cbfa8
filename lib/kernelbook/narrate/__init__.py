"""Narration: the sentences a chapter writes from the numbers `analyze` returns, in the book's language (en, zh).
Nothing here computes a figure the analysis does not hand it."""
