"""Document inputs as in the reference experiment: OmniDocBench pages when given, else synthetic pages.

Synthetic pages are deterministic (seeded): a title, text blocks, a ruled table and a formula line,
drawn with Pillow at letter size (1224 x 1584 px, 144 dpi), which the DeepSeek-OCR-2 processor cuts
into 1 global 1024 view + 6 local 768 crops in crop mode.
"""
from __future__ import annotations

import hashlib
import math
import random
from pathlib import Path

INSTRUCTION = "Convert the document to markdown."  # the reference experiment's request
PROMPT = "<image>\n" + INSTRUCTION  # DeepSeek-OCR-2's reference prompt; its processor knows `<image>`
PAGE_SIZE = (1224, 1584)  # width, height in px
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".bmp"}


def synthetic_pages(n: int, seed: int = 0):
    """`n` deterministic document pages (PIL RGB images)."""
    from PIL import Image, ImageDraw

    pages = []
    for i in range(n):
        rng = random.Random(seed * 1000 + i)
        img = Image.new("RGB", PAGE_SIZE, "white")
        d = ImageDraw.Draw(img)
        w, h = PAGE_SIZE
        y = 80
        d.rectangle([80, y, w - 80, y + 40], fill=(30, 30, 30))  # title bar
        y += 80
        for _block in range(3):  # text blocks: rows of word-like dashes
            for _line in range(rng.randint(5, 9)):
                x = 80
                while x < w - 160:
                    word = rng.randint(20, 90)
                    d.rectangle([x, y, x + word, y + 12], fill=(60, 60, 60))
                    x += word + 14
                y += 24
            y += 30
        rows, cols = rng.randint(4, 7), rng.randint(3, 5)  # a ruled table
        tw, th = w - 160, rows * 34
        for r in range(rows + 1):
            d.line([80, y + r * 34, 80 + tw, y + r * 34], fill="black", width=2)
        for c in range(cols + 1):
            d.line([80 + c * tw // cols, y, 80 + c * tw // cols, y + th], fill="black", width=2)
        for r in range(rows):
            for c in range(cols):
                d.text((90 + c * tw // cols, y + r * 34 + 10), f"{rng.randint(0, 9999)}", fill="black")
        y += th + 50
        d.text((w // 2 - 120, y), "E = m c^2 + sum_i a_i x_i / (1 + e^-t)", fill="black")  # a formula line
        pages.append(img)
    return pages


def omnidocbench_pages(folder: str | Path, subset_file: str | Path | None, n: int):
    """The first `n` pages of an OmniDocBench folder, in the order of `subset_file` when given
    (one file name per line, the dev-20 list), else sorted by name."""
    from PIL import Image

    folder = Path(folder)
    if subset_file:
        names = [ln.strip() for ln in Path(subset_file).read_text().splitlines() if ln.strip()]
        files = [folder / nm for nm in names]
    else:
        files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    missing = [str(f) for f in files[:n] if not f.exists()]
    if missing:
        raise FileNotFoundError(f"OmniDocBench images not found: {missing[:3]}")
    if not files:
        raise FileNotFoundError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) under {folder}")
    return [Image.open(f).convert("RGB") for f in files[:n]]


def prompt_token_ids(text: str, vocab_size: int, reserved: set[int]) -> list[int]:
    """Stand-in token ids for `text` when no tokenizer is available (random weights).

    One id per word or punctuation mark (about what a BPE tokenizer gives for this prompt), chosen by
    a stable hash so runs are reproducible. Kernel shapes depend on the count, not the values.
    """
    pieces, cur = [], ""
    for ch in text:
        if ch.isalnum():
            cur += ch
        else:
            if cur:
                pieces.append(cur)
            cur = ""
            if not ch.isspace() or ch == "\n":
                pieces.append(ch)
    if cur:
        pieces.append(cur)
    # keep clear of the low and high ids, where vocabularies put their special tokens
    lo = min(1000, vocab_size // 10)
    span = vocab_size - 2 * lo
    ids = []
    for p in pieces:
        v = int(hashlib.sha1(p.encode()).hexdigest(), 16) % span
        while v + lo in reserved:
            v = (v + 1) % span
        ids.append(v + lo)
    return ids


def exactly(ids: list[int], n: int) -> list[int]:
    """`ids` repeated and cut to exactly `n` (a prompt of n tokens made from a shorter one)."""
    if not ids:
        raise ValueError("cannot make a prompt of n tokens from an empty one")
    return (ids * -(-n // len(ids)))[:n]


def deepseek_ocr2_image_tokens(n_crops: int, base_size: int = 1024, tile: int = 768,
                               patch: int = 16, downsample: int = 4, crop: bool = True) -> int:
    """Image placeholder tokens per image, by the DeepSeek-OCR-2 processor's rule:
    ceil(global/patch/ds)^2 global + ceil(tile/patch/ds)^2 per crop + 1 view separator, where the
    global view is base_size in crop mode and the tile size without it (the processor's choice)."""
    g = math.ceil((base_size if crop else tile) / patch / downsample)
    t = math.ceil(tile / patch / downsample)
    return g * g + t * t * n_crops + 1
