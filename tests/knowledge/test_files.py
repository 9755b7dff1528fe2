"""Files people send (issue 37): the type from the bytes, what is refused and why, images cleaned of their metadata
and counted in a vision model's tokens."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

import pytest
from PIL import Image

from knowledge.files import FileKind, FileRefused, RefusedCode, clean_name, read_file, sniff
from knowledge.images import clean_image, image_for_model, model_size
from llm.tokens import image_tokens
from tests.knowledge.factories import make_docx, make_pdf

MB = 1024 * 1024


def _image(fmt: str, size=(64, 48), mode="RGB", **save) -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, (200, 30, 30, 128)[: len(mode)] if mode != "L" else 128).save(buffer, fmt, **save)
    return buffer.getvalue()


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def huge_png(width: int, height: int) -> bytes:
    """A PNG whose header says width x height, with a tiny IDAT: a decompression bomb that is never decoded."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(b"\x00" * 1024))
        + _png_chunk(b"IEND", b"")
    )


def zip_bomb_docx(unpacked: int) -> bytes:
    """A .docx (it has word/document.xml) with an entry of `unpacked` zeros, deflated to a few kilobytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w", force_zip64=True) as entry:
            block = b"\x00" * MB
            for _ in range(unpacked // MB):
                entry.write(block)
    return buffer.getvalue()


# --- sniffing ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "name", "content_type"),
    [
        (_image("PNG"), "x.png", "image/png"),
        (_image("JPEG"), "x.png", "image/jpeg"),  # the name does not decide
        (_image("GIF"), "x", "image/gif"),
        (_image("WEBP"), "x.webp", "image/webp"),
        (_image("BMP"), "x.bmp", "image/bmp"),
        (make_pdf(["Hello"]), "x.txt", "application/pdf"),
        (make_docx(heading="H", paragraphs=["p"]), "x.zip",
         "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
        ("价格：12元".encode(), "menu.txt", "text/plain"),
        ("价格：12元".encode("gb18030"), "menu", "text/plain"),
        (b"# Title\n", "notes.md", "text/markdown"),
        (b"a,b\n1,2\n", "t.csv", "text/csv"),
        (b'{"a": 1}', "d.json", "application/json"),
        (b"<p>hi</p>", "p.html", "text/html"),
        (b"#!/bin/sh\necho hi\n", "run.sh", "text/plain"),
        (b"MZ\x90\x00" + b"\x00" * 60, "report.pdf", "application/x-executable"),
        (b"\x7fELF\x02\x01\x01" + b"\x00" * 60, "a.png", "application/x-executable"),
        (b"\xcf\xfa\xed\xfe" + b"\x00" * 60, "a.txt", "application/x-executable"),
        (b"\x00\x01\x02binary\x00", "a.txt", "application/octet-stream"),
        (b"BMW cars are fast", "cars.txt", "text/plain"),  # "BM" is not enough for a bitmap
    ],
)  # fmt: skip
def test_the_type_comes_from_the_bytes(data, name, content_type):
    assert sniff(data, name) == content_type


@pytest.mark.parametrize(
    ("name", "content_type", "cleaned"),
    [
        ("../../etc/report.exe", "application/pdf", "report.pdf"),
        ("C:\\Users\\me\\scan", "image/jpeg", "scan.jpg"),
        ("photo.JPEG", "image/jpeg", "photo.jpeg"),
        ("menu.png", "image/jpeg", "menu.jpg"),
        ("deploy.sh", "text/plain", "deploy.sh"),
        ("notes.v2", "application/pdf", "notes.v2.pdf"),
        ("\x00\n", "text/plain", "file.txt"),
    ],
)
def test_a_name_loses_its_folders_and_says_the_real_type(name, content_type, cleaned):
    assert clean_name(name, content_type) == cleaned


# --- refusals ----------------------------------------------------------------------------------------------------


def _refused(name: str, data: bytes, max_bytes: int = 20 * MB) -> FileRefused:
    with pytest.raises(FileRefused) as caught:
        read_file(name, data, max_bytes=max_bytes, ocr=False)
    assert caught.value.message and str(caught.value) == caught.value.message
    return caught.value


def test_a_renamed_executable_is_refused_as_a_program():
    refused = _refused("invoice.pdf", b"MZ\x90\x00\x03" + b"\x00" * 200 + b"This program cannot be run in DOS mode")
    assert refused.code == RefusedCode.EXECUTABLE
    assert "invoice.pdf" in refused.message and "program" in refused.message


def test_a_zip_bomb_docx_is_refused_without_unpacking_it():
    bomb = zip_bomb_docx(200 * MB)
    assert len(bomb) < MB
    refused = _refused("contract.docx", bomb)
    assert refused.code == RefusedCode.ARCHIVE_BOMB
    assert refused.params["unpacked"] >= 200 * MB


def test_a_docx_packed_a_thousand_to_one_is_refused_under_the_absolute_limit(settings):
    settings.KNOWLEDGE_MAX_UNPACKED_BYTES = 10**12
    assert _refused("contract.docx", zip_bomb_docx(20 * MB)).code == RefusedCode.ARCHIVE_BOMB


def test_a_30000_by_30000_png_is_refused_from_its_header():
    bomb = huge_png(30000, 30000)
    assert len(bomb) < 2000
    refused = _refused("huge.png", bomb)
    assert refused.code == RefusedCode.TOO_MANY_PIXELS
    assert "900,000,000 pixels" in refused.message


def test_the_pixel_bound_is_the_setting(settings):
    settings.ATTACHMENT_MAX_PIXELS = 1000
    assert _refused("small.png", _image("PNG", size=(40, 30))).code == RefusedCode.TOO_MANY_PIXELS


def test_a_truncated_pdf_is_refused_as_broken():
    whole = make_pdf(["First page of the contract."] * 3)
    refused = _refused("contract.pdf", whole[:60])
    assert refused.code == RefusedCode.BROKEN
    assert "PDF" in refused.message


def test_a_truncated_image_is_refused_as_broken():
    photo = _image("JPEG", size=(400, 300))
    assert _refused("photo.jpg", photo[: len(photo) // 3]).code == RefusedCode.BROKEN


def test_a_file_over_the_limit_is_refused_with_both_sizes():
    refused = _refused("notes.txt", b"a" * (2 * MB), max_bytes=MB)
    assert refused.code == RefusedCode.TOO_LARGE
    assert "2 MB" in refused.message and "1 MB" in refused.message


def test_an_empty_file_is_refused():
    assert _refused("empty.pdf", b"").code == RefusedCode.EMPTY


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"PK\x03\x04" + b"\x00" * 100, RefusedCode.UNSUPPORTED_TYPE),  # a zip that is not a .docx
        (b"\x00\x00\x00\x18ftypheic" + b"\x00" * 100, RefusedCode.UNSUPPORTED_TYPE),
        (make_pdf([""]), RefusedCode.NO_TEXT),
        (b"   \n\n ", RefusedCode.NO_TEXT),
    ],
)
def test_other_files_are_refused_with_their_reason(data, code):
    assert _refused("file", data).code == code


# --- what is read ------------------------------------------------------------------------------------------------


def test_a_pdf_is_read_by_pages_and_kept_as_sent():
    data = make_pdf(["Payment is due in 30 days.", "Either party may end it."])
    read = read_file("contract", data, max_bytes=20 * MB)
    assert (read.kind, read.name, read.content_type, read.pages, read.from_ocr) == (
        FileKind.DOCUMENT, "contract.pdf", "application/pdf", 2, False
    )  # fmt: skip
    assert read.data == data
    assert [s.metadata["page"] for s in read.sections] == [1, 2]
    assert "30 days" in read.text and "Either party" in read.text


def test_a_docx_and_a_csv_are_read_by_the_knowledge_parsers():
    docx = read_file("terms.docx", make_docx(heading="Terms", paragraphs=["Pay within 30 days."]), max_bytes=MB)
    assert "Pay within 30 days." in docx.text
    csv = read_file("prices.csv", "dish,price\n宫保鸡丁,38\n".encode(), max_bytes=MB)
    assert csv.content_type == "text/csv" and "price: 38" in csv.text


def test_an_image_is_re_encoded_without_its_exif():
    exif = Image.Exif()
    exif[0x010F] = "PhoneMaker"  # Make
    exif[0x8825] = {2: (39.0, 54.0, 26.0), 4: (116.0, 23.0, 29.0)}  # GPSInfo: latitude, longitude
    photo = io.BytesIO()
    Image.new("RGB", (320, 240), (10, 120, 200)).save(photo, "JPEG", exif=exif, comment=b"secret")
    assert b"PhoneMaker" in photo.getvalue()

    read = read_file("me.jpg", photo.getvalue(), max_bytes=MB, ocr=False)

    assert (read.kind, read.content_type, read.width, read.height) == (FileKind.IMAGE, "image/jpeg", 320, 240)
    assert b"PhoneMaker" not in read.data and b"secret" not in read.data
    stored = Image.open(io.BytesIO(read.data))
    assert not stored.getexif() and 0x8825 not in stored.getexif()


def test_the_exif_orientation_is_applied():
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to view
    photo = io.BytesIO()
    Image.new("RGB", (300, 100), "white").save(photo, "JPEG", exif=exif)
    cleaned = clean_image(photo.getvalue())
    assert (cleaned.width, cleaned.height) == (100, 300)


def test_drawn_and_transparent_images_stay_png_photos_become_jpeg():
    assert clean_image(_image("PNG")).content_type == "image/png"
    assert clean_image(_image("WEBP", mode="RGBA")).content_type == "image/png"
    assert clean_image(_image("BMP")).content_type == "image/png"
    assert clean_image(_image("WEBP")).content_type == "image/jpeg"


# --- what a vision model gets ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("width", "height", "detail", "tokens"),
    [(1024, 1024, "high", 765), (2048, 4096, "high", 1105), (2048, 4096, "low", 85), (4096, 8192, "low", 85),
     (1024, 1024, "auto", 765), (512, 512, "high", 255), (100, 100, "high", 255)],
)  # fmt: skip
def test_image_tokens_follow_openais_formula(width, height, detail, tokens):
    assert image_tokens(width, height, detail) == tokens


def test_image_for_model_scales_as_the_detail_asks():
    photo = clean_image(_image("JPEG", size=(1080, 1440))).data
    data, width, height = image_for_model(photo, "high")
    assert (width, height) == (768, 1024) == model_size(1080, 1440, "high")
    assert Image.open(io.BytesIO(data)).size == (768, 1024)
    assert image_for_model(photo, "low")[1:] == (384, 512)
    small = clean_image(_image("PNG", size=(200, 100))).data
    assert image_for_model(small, "high") == (small, 200, 100)
