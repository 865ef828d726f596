"""Reading a PDF page that has no text layer from its image: RapidOCR (PaddleOCR's detection,
direction and recognition models as ONNX, shipped inside the `rapidocr-onnxruntime` wheel, so it
works offline). The engine loads on the first scanned page, once per process."""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ragmcp.domain.errors import ParseFailure

if TYPE_CHECKING:
    import pypdfium2 as pdfium

NOT_INSTALLED = "scanned page, but OCR is not installed (rapidocr-onnxruntime)"

Detection = Sequence[Any]
"""One RapidOCR result: [corner points (4 x [x, y]), text, confidence]."""


class PageOcr:
    """Renders a page at `dpi` and reads its text lines top to bottom, left to right."""

    def __init__(self, dpi: int = 200):
        self.dpi = dpi
        self._lock = threading.Lock()

    def read(self, page: pdfium.PdfPage) -> str:
        engine = _engine()
        bitmap = page.render(scale=self.dpi / 72)
        try:
            image = bitmap.to_numpy()
            with self._lock:  # one page at a time: the engine's sessions already use every core
                detections, _ = engine(image)
        finally:
            bitmap.close()
        return "\n".join(lines(detections or []))


@functools.cache
def page_ocr() -> PageOcr:
    """The process's one PageOcr (its lock keeps scanned pages from competing for the cores)."""
    return PageOcr()


@functools.cache
def _engine() -> Any:
    try:
        from rapidocr_onnxruntime import RapidOCR
    except ImportError:
        raise ParseFailure(NOT_INSTALLED) from None
    return RapidOCR()


def lines(detections: Sequence[Detection]) -> list[str]:
    """Text boxes joined into lines: a box whose vertical middle lies within the current line's
    height joins it; each line reads left to right."""
    boxes = []
    for points, text, _score in detections:
        ys = [p[1] for p in points]
        boxes.append((min(ys), max(ys), min(p[0] for p in points), str(text)))
    boxes.sort(key=lambda box: (box[0], box[2]))
    rows: list[list[tuple[float, float, float, str]]] = []
    for box in boxes:
        middle = (box[0] + box[1]) / 2
        if rows and rows[-1][0][0] <= middle <= rows[-1][0][1]:
            rows[-1].append(box)
        else:
            rows.append([box])
    return [" ".join(box[3] for box in sorted(row, key=lambda box: box[2])) for row in rows]
