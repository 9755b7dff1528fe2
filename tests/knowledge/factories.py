"""Factories and real small files for the knowledge tests (a hand-written PDF, a docx made with python-docx)."""

from __future__ import annotations

import io
import json

import factory

from knowledge.models import KnowledgeBase


class KnowledgeBaseFactory(factory.django.DjangoModelFactory):
    """Create inside the tenant's scope."""

    class Meta:
        model = KnowledgeBase

    name = factory.Sequence(lambda n: f"knowledge base {n}")
    chunk_size = 60
    chunk_overlap = 15


def _pdf_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(pages: list[str]) -> bytes:
    """A real PDF with one page per string (Helvetica, one line of text per line of the string)."""
    count = len(pages)
    page_ids = [4 + 2 * i for i in range(count)]
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: f"<< /Type /Pages /Kids [{' '.join(f'{p} 0 R' for p in page_ids)}] /Count {count} >>".encode(),
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    }
    for page_id, text in zip(page_ids, pages, strict=True):
        lines = " ".join(f"({_pdf_escape(line)}) Tj T*" for line in text.split("\n"))
        stream = f"BT /F1 11 Tf 14 TL 50 750 Td {lines} ET".encode("latin-1")
        objects[page_id] = (
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            f"/Contents {page_id + 1} 0 R >>"
        ).encode()
        objects[page_id + 1] = b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream"
    out = bytearray(b"%PDF-1.4\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += f"{number} 0 obj\n".encode() + objects[number] + b"\nendobj\n"
    xref = len(out)
    size = max(objects) + 1
    out += f"xref\n0 {size}\n0000000000 65535 f \n".encode()
    for number in range(1, size):
        out += f"{offsets[number]:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {size} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def make_docx(*, heading: str, paragraphs: list[str], table: list[list[str]] | None = None) -> bytes:
    """A real .docx: a heading, paragraphs, then a table."""
    import docx

    document = docx.Document()
    document.add_heading(heading, level=1)
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


MENU = {
    "1": {"name": "经典黄焖鸡", "description": "鸡肉鲜嫩，配以浓郁酱汁和土豆", "price": "12元", "category": "主菜"},
    "2": {"name": "辣味黄焖鸡", "description": "经典黄焖鸡基础上加入辣椒调味", "price": "13元", "category": "主菜"},
    "3": {"name": "香菇黄焖鸡", "description": "黄焖鸡加入香菇，风味独特", "price": "14元", "category": "主菜"},
}

SOLAR_TEXT = (
    "Solar panels turn sunlight into direct current. An inverter changes it into alternating current. "
    "Panels facing south collect the most energy in the northern hemisphere. Dust and shade lower the yield. "
    "Modules lose about half a percent of their power every year. Batteries store the surplus for the night. "
    "光伏组件把太阳光转换成直流电。逆变器把直流电变成交流电。组件朝南安装发电量最高。灰尘和遮挡会降低发电量。"
)


def sample_files() -> dict[str, bytes]:
    """One small real file of each supported type, each mentioning a word only it contains."""
    return {
        "notes.txt": SOLAR_TEXT.encode("utf-8"),
        "guide.md": b"# Guide\n\n## Inverters\n\nThe inverter converts current. Kestrel mode saves power.\n",
        "page.html": (
            b"<html><head><title>Page</title><style>.x{color:red}</style><script>var secret=1;</script></head>"
            b"<body><h1>Heron</h1><p>Herons wade in shallow water.</p></body></html>"
        ),
        "report.pdf": make_pdf(["Osprey report, page one.", "Ospreys dive for fish."]),
        "manual.docx": make_docx(
            heading="Falcon manual", paragraphs=["Falcons fly fast."], table=[["part", "size"], ["wing", "1 m"]]
        ),
        "table.csv": b"name,habitat\nPelican,coast\nPuffin,cliffs\n",
        "menu.json": json.dumps(MENU, ensure_ascii=False).encode("utf-8"),
    }
