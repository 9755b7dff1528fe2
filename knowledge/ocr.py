"""Offline OCR of Chinese and English print (issue 37): the text in a photo of a menu, a receipt or a notice, and in
the pages of a scanned PDF.

The engine is RapidOCR (the `rapidocr` package, Apache-2.0): PaddleOCR's PP-OCRv6 small detection and recognition
models and the PP-OCR mobile text-direction classifier, run by onnxruntime. The wheel ships the three model files;
they are named here by path, so nothing is ever downloaded (RapidOCR downloads a model only when no path is given
and the file is missing). Why this one and not rapidocr-onnxruntime (PP-OCRv4): docs/knowledge.md, "Images and
scanned PDFs"; bench/attachments.py measures it.

One engine per process, loaded on first use under a lock (about a second). Reads run one at a time, each on
OCR_THREADS onnxruntime threads, so OCR never takes more than the machine's two cores however many requests ask.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, ImageOps

from knowledge import images

OCR_THREADS = 2
# Detection sees the image with its longer side at most this (PaddleOCR's own default; RapidOCR's is the shorter side
# at least 736, which keeps a phone photo whole): on the project's set, 1.6x faster with the same character errors.
DETECTION_SIDE = 960
# Lines recognised with less confidence than this are dropped (RapidOCR's own default).
MIN_SCORE = 0.5

_engine: Any = None
_load_lock = threading.Lock()
_run_lock = threading.Lock()


@dataclass(frozen=True)
class OcrLine:
    text: str
    box: tuple[float, float, float, float]  # left, top, right, bottom in the image's pixels
    score: float


@dataclass(frozen=True)
class OcrText:
    """What OCR read in an image: `text` has a line per row of the image, top to bottom, each row's pieces left to
    right; `seconds` is the time the read took (not counting the wait for another read or the first load)."""

    text: str
    lines: tuple[OcrLine, ...]
    seconds: float


def model_files() -> dict[str, Path]:
    """The model files the engine uses, inside the installed rapidocr package."""
    # rapidocr imports OpenCV (~0.3 s): only a process that reads images needs it
    import rapidocr  # noqa: PLC0415

    folder = Path(rapidocr.__file__).resolve().parent / "models"
    return {
        "det": folder / "PP-OCRv6_det_small.onnx",
        "rec": folder / "PP-OCRv6_rec_small.onnx",
        "cls": folder / "ch_ppocr_mobile_v2.0_cls_mobile.onnx",
    }


def engine() -> Any:
    """The process's OCR engine, made on first use."""
    global _engine
    if _engine is None:
        with _load_lock:
            if _engine is None:
                _engine = _make_engine()
    return _engine


def _make_engine() -> Any:
    # rapidocr and OpenCV are heavy and only needed where images are read
    from rapidocr import RapidOCR  # noqa: PLC0415

    files = model_files()
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise RuntimeError(f"OCR model files are missing: {', '.join(missing)}. Run `make install`.")
    threads = {"intra_op_num_threads": OCR_THREADS, "inter_op_num_threads": 1}
    params = {
        "Global.log_level": "error",
        "Global.text_score": MIN_SCORE,
        "Det.limit_type": "max",
        "Det.limit_side_len": DETECTION_SIDE,
        "Det.model_path": str(files["det"]),
        "Rec.model_path": str(files["rec"]),
        "Cls.model_path": str(files["cls"]),
        **{f"EngineConfig.onnxruntime.{name}": value for name, value in threads.items()},
    }
    ocr = RapidOCR(params=params)
    logging.getLogger("RapidOCR").setLevel(logging.ERROR)
    return ocr


def read_image_text(data: bytes) -> OcrText:
    """The text in the image `data` (any format knowledge.images reads, bounded by its pixel limit), upright by its
    EXIF orientation. Raises knowledge.images.ImageRefused for what is not a readable image."""
    image = images.open_bounded(data)
    try:
        image.load()
        image = ImageOps.exif_transpose(image) or image
    except (OSError, ValueError, SyntaxError) as exc:
        raise images.broken_image(exc) from exc
    return read_pixels_text(image)


def read_pixels_text(image: Image.Image) -> OcrText:
    """The text in a decoded image, lines in reading order."""
    # numpy comes with onnxruntime; imported here with the rest of the OCR stack
    import numpy as np  # noqa: PLC0415

    pixels = np.asarray(image.convert("RGB"))[:, :, ::-1].copy()  # RapidOCR takes OpenCV's BGR order
    ocr = engine()
    with _run_lock:
        started = time.perf_counter()
        result = ocr(pixels)
        seconds = time.perf_counter() - started
    lines = []
    angles = []
    boxes = result.boxes if result.boxes is not None else ()
    for box, text, score in zip(boxes, result.txts or (), result.scores or (), strict=True):
        xs = [float(point[0]) for point in box]
        ys = [float(point[1]) for point in box]
        if text.strip():
            lines.append(OcrLine(text.strip(), (min(xs), min(ys), max(xs), max(ys)), float(score)))
            angles.append(math.atan2(ys[1] - ys[0], xs[1] - xs[0]))  # the quad's top edge, left to right
    ordered = reading_order(lines, statistics.median(angles) if angles else 0.0)
    return OcrText("\n".join(" ".join(line.text for line in row) for row in ordered), tuple(lines), seconds)


def reading_order(lines: list[OcrLine], skew: float = 0.0) -> list[list[OcrLine]]:
    """Lines grouped into rows, top to bottom, each row left to right. A line joins a row when its vertical centre
    is within half a line's height of the row's, measured across the page's `skew` (radians, the median slope of the
    lines: a photo taken a few degrees off puts a price on the right higher than its dish on the left)."""
    if not lines:
        return []
    height = statistics.median(line.box[3] - line.box[1] for line in lines) or 1.0
    cos, sin = math.cos(skew), math.sin(skew)

    def across(line: OcrLine) -> float:
        x, y = (line.box[0] + line.box[2]) / 2, (line.box[1] + line.box[3]) / 2
        return y * cos - x * sin

    rows: list[list[OcrLine]] = []
    for line in sorted(lines, key=across):
        if rows and abs(across(line) - statistics.fmean(across(item) for item in rows[-1])) <= height / 2:
            rows[-1].append(line)
        else:
            rows.append([line])
    return [sorted(row, key=lambda item: item.box[0]) for row in rows]
