"""A stand-in for the PDF report's chart renderer (kaleido and Chromium): grey PNGs of the right size, and the list
of the charts' titles in the order they were drawn."""

from __future__ import annotations

import io

from app.report import pdf as R


def stand_in_renderer(monkeypatch):
    from PIL import Image

    rendered = []

    def fake_png(fig, width=R.EXPORT_WIDTH, height=None, scale=1.0):
        rendered.append(fig.layout.title.text)
        h = int(height or fig.layout.height or 500)
        buf = io.BytesIO()
        Image.new("RGB", (width // 4, h // 4), (90, 90, 90)).save(buf, format="PNG")
        return buf.getvalue()

    monkeypatch.setattr(R, "figure_to_png", fake_png)
    monkeypatch.setattr(R, "_ensure_kaleido", lambda: None)
    return rendered
