"""Parsers (K1): each file type's text and metadata, encodings, and clear errors for files that cannot be read."""

from __future__ import annotations

import json

import pytest

from knowledge.parsing import ParseError, file_type_for, parse_document
from tests.knowledge.factories import MENU, make_docx, make_pdf


def _texts(sections) -> str:
    return "\n".join(section.text for section in sections)


@pytest.mark.parametrize(
    ("name", "file_type"),
    [("a.txt", "txt"), ("B.MD", "md"), ("c.htm", "html"), ("d.pdf", "pdf"), ("e.docx", "docx"), ("f.csv", "csv"),
     ("g.json", "json"), ("h.jsonl", "json")],
)  # fmt: skip
def test_the_file_type_comes_from_the_extension(name, file_type):
    assert file_type_for(name) == file_type


@pytest.mark.parametrize("name", ["virus.exe", "old.doc", "no-extension"])
def test_an_unsupported_type_is_refused_with_the_supported_list(name):
    with pytest.raises(ParseError, match=r"not a supported file type.*\.txt.*\.pdf"):
        file_type_for(name)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "gb18030", "utf-16"])
def test_chinese_text_in_each_encoding(encoding):
    text = "光伏组件把太阳光转换成直流电。Solar works."
    sections = parse_document(text.encode(encoding), "txt")
    assert sections[0].text == text


def test_binary_data_in_a_text_file_is_refused():
    with pytest.raises(ParseError, match="not a text file"):
        parse_document(b"\x00\x01\x02binary", "txt")


def test_an_empty_file_is_refused():
    with pytest.raises(ParseError, match="empty"):
        parse_document(b"", "txt")


def test_markdown_is_cut_at_headings_with_the_heading_path():
    data = b"# Guide\nintro\n## Setup\nmount it\n```\n# not a heading\n```\n## Care\nclean it\n"
    sections = parse_document(data, "md")
    assert [s.metadata.get("heading") for s in sections] == ["Guide", "Guide › Setup", "Guide › Care"]
    assert "# not a heading" in sections[1].text


def test_html_keeps_visible_text_and_drops_scripts_and_styles():
    data = (
        b"<html><head><title>Herons</title><style>p{color:red}</style></head><body>"
        b"<script>alert('x')</script><h1>Birds</h1><p>Herons&nbsp;wade.</p><table><tr><td>a</td><td>b</td></tr>"
        b"</table></body></html>"
    )
    (section,) = parse_document(data, "html")
    assert section.metadata == {"title": "Herons"}
    assert "Birds" in section.text and "Herons wade." in section.text and "a | b" in section.text
    assert "alert" not in section.text and "color" not in section.text


def test_html_in_gbk_is_decoded_by_its_meta_charset():
    data = '<html><head><meta charset="gbk"></head><body><p>黄焖鸡</p></body></html>'.encode("gbk")
    assert parse_document(data, "html")[0].text == "黄焖鸡"


def test_pdf_gives_a_section_per_page():
    sections = parse_document(make_pdf(["First page text.", "Second page (two)."]), "pdf")
    assert [s.metadata for s in sections] == [{"page": 1}, {"page": 2}]
    assert "First page text." in sections[0].text and "Second page (two)." in sections[1].text


def test_a_file_that_is_not_a_pdf_fails_with_a_clear_reason():
    with pytest.raises(ParseError, match="not a PDF"):
        parse_document(b"hello, I am text pretending to be a PDF", "pdf")


def test_a_damaged_pdf_fails_with_a_clear_reason():
    broken = make_pdf(["Some text."])[:40]  # the header survives, the objects do not
    with pytest.raises(ParseError, match="PDF"):
        parse_document(broken, "pdf")


def test_a_pdf_without_text_asks_for_ocr():
    with pytest.raises(ParseError, match="no text layer"):
        parse_document(make_pdf([""]), "pdf")


def test_docx_paragraphs_and_tables_in_order():
    data = make_docx(heading="Falcon", paragraphs=["Falcons fly fast."], table=[["part", "size"], ["wing", "1 m"]])
    sections = parse_document(data, "docx")
    text = _texts(sections)
    assert text.index("Falcons fly fast.") < text.index("part | size") < text.index("wing | 1 m")
    assert sections[0].metadata == {"heading": "Falcon"}


def test_a_file_that_is_not_a_docx_fails_with_a_clear_reason():
    with pytest.raises(ParseError, match=r"not a Word \.docx"):
        parse_document(b"{\\rtf1 old word}", "docx")


def test_csv_rows_are_records_with_the_header_names():
    sections = parse_document("name;price\n经典黄焖鸡;12元\n\n辣味黄焖鸡;13元\n".encode(), "csv")
    assert [s.text for s in sections] == ["name: 经典黄焖鸡\nprice: 12元", "name: 辣味黄焖鸡\nprice: 13元"]
    assert all(s.record for s in sections)
    assert sections[1].metadata == {"row": 2, "record": {"name": "辣味黄焖鸡", "price": "13元"}}


def test_json_object_of_objects_is_a_record_per_key():
    sections = parse_document(json.dumps(MENU, ensure_ascii=False).encode(), "json")
    assert [s.metadata["key"] for s in sections] == ["1", "2", "3"]
    assert sections[2].text.startswith("name: 香菇黄焖鸡\ndescription: 黄焖鸡加入香菇")
    assert sections[2].metadata["record"]["price"] == "14元"
    assert all(s.record for s in sections)


def test_json_list_and_json_lines_are_a_record_per_item():
    listed = parse_document(b'[{"q": "one"}, {"q": "two"}]', "json")
    assert [(s.text, s.metadata["index"]) for s in listed] == [("q: one", 0), ("q: two", 1)]
    lines = parse_document(b'{"q": "one"}\n{"q": "two"}\n', "json")
    assert [s.text for s in lines] == ["q: one", "q: two"]


def test_invalid_json_says_where():
    with pytest.raises(ParseError, match=r"not valid.*line 2"):
        parse_document(b'{"a": 1,\n oops}', "json")
