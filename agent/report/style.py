"""The one stylesheet, inlined into every page so each opens offline on its own; `escape`, how every page writes text."""
import html

from ptxbench.tools.visible import bidi_escaped

CSS = """
body{font:14px/1.45 -apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px auto;max-width:1300px;color:#222;padding:0 16px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}th,td{border:1px solid #ddd;padding:4px 8px;text-align:left}
th{background:#f4f6f8}tr:nth-child(even) td{background:#fafafa}.note{color:#666;font-size:12px}
pre{background:#f7f7f7;padding:8px;overflow-x:auto;font-size:12px;white-space:pre-wrap}
pre.diff{max-height:640px;overflow:auto}pre.diff span{display:block}.add{background:#e6ffec}.del{background:#ffebe9}.hunk{color:#6f42c1}
.s-PASSED{color:#1a7f37;font-weight:600}.s-INFRA_ERROR{color:#9a6700}.s-COMPILED{color:#0969da}
[class^='s-']:not(.s-PASSED):not(.s-INFRA_ERROR):not(.s-COMPILED){color:#cf222e}.v-executed{color:#1a7f37}.err{color:#9a6700}
section.turn{border:1px solid #e3e3e3;border-radius:6px;padding:4px 14px;margin:14px 0}
.nav a{margin-right:10px;text-decoration:none}img{max-width:100%;border:1px solid #eee;margin:6px 0}
.plots{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0}figcaption{font-weight:600;font-size:13px}
"""


def escape(text: str) -> str:
    """`text` for HTML, its bidirectional controls shown as escapes (tools/visible.py): a kernel's line in a report
    reads as the compiler reads it."""
    return html.escape(bidi_escaped(text))


# Every text from a run is escaped; should one ever slip through, the page still runs no script and fetches nothing (a
# model's `<img src=https://...>` would tell a server who opened the report): only the inline style and data: images.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def page(title: str, body: str) -> str:
    # the title first: `report` knows an earlier report's folder by its title in the first 300 bytes (cmd_report.py)
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\"><style>{CSS}</style></head><body>{body}</body></html>\n")
