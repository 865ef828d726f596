"""A minimal born-digital PDF writer for the parser tests: text drawn by content streams, in Type 1 fonts."""

from __future__ import annotations

from collections.abc import Sequence


def pdf_of_contents(contents: list[str], title: str | None = None, fonts: Sequence[str] = ("Helvetica",)) -> bytes:
    """A PDF with one page per content stream; `fonts` are the base fonts /F1, /F2, ... in that order."""
    first_page = 3 + len(fonts)
    kids = " ".join(f"{first_page + 2 * i} 0 R" for i in range(len(contents)))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {len(contents)} >>".encode(),
    ]
    objects += [f"<< /Type /Font /Subtype /Type1 /BaseFont /{font} >>".encode() for font in fonts]
    resources = " ".join(f"/F{i + 1} {3 + i} 0 R" for i in range(len(fonts)))
    for i, text in enumerate(contents):
        content = text.encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << {resources} >> >> /Contents {first_page + 1 + 2 * i} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
    info = ""
    if title:
        objects.append(f"<< /Title ({title}) >>".encode())
        info = f" /Info {len(objects)} 0 R"
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, info.encode(), xref)
    return out
