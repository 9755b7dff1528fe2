"""core.markdown.render_markdown: a safe subset of HTML; nothing from a model ever runs in the page."""

from core.markdown import render_markdown


def test_script_and_style_are_removed_with_their_content():
    html = render_markdown("Hello\n\n<script>alert(1)</script>\n\n<style>body{display:none}</style>\n\nbye")
    assert "<script" not in html and "alert(1)" not in html
    assert "<style" not in html and "display:none" not in html
    assert "Hello" in html and "bye" in html


def test_event_handlers_and_unknown_tags_are_removed():
    html = render_markdown('<img src=x onerror="alert(1)"> <a href="https://example.com" onclick="steal()">x</a>')
    assert "onerror" not in html and "onclick" not in html and "<img" not in html and "steal()" not in html
    assert 'href="https://example.com"' in html
    html = render_markdown('<iframe src="https://evil.example"></iframe><div onmouseover="x()">hi</div>')
    assert "<iframe" not in html and "onmouseover" not in html


def test_javascript_links_lose_their_target():
    for link in ("[click](javascript:alert(1))", '<a href="javascript:alert(1)">click</a>', "[x](data:text/html,hi)"):
        html = render_markdown(link)
        assert "javascript:" not in html and "data:text" not in html
        assert "click" in html or "x" in html


def test_links_get_a_safe_rel():
    html = render_markdown("[docs](https://example.com/docs)")
    assert 'href="https://example.com/docs"' in html and "noopener" in html


def test_code_is_shown_literally():
    html = render_markdown("Run `<b>bold</b>` then:\n\n```html\n<script>alert(1)</script>\n```")
    assert "<code>&lt;b&gt;bold&lt;/b&gt;</code>" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>" not in html
    assert "<pre>" in html


def test_tables_are_kept():
    html = render_markdown("| dish | price |\n|---|---:|\n| 饺子 | 18 |")
    assert "<table>" in html and "<th>dish</th>" in html and "<td>饺子</td>" in html


def test_empty_and_plain_text():
    assert render_markdown("") == ""
    assert render_markdown(None) == ""
    assert render_markdown("a < b & c") == "<p>a &lt; b &amp; c</p>"
