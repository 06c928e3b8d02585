"""figure_to_png retries once, on a fresh kaleido server, a render whose page had not loaded kaleido's scripts;
every other failure is reported at once."""

import pytest

from app.report import pdf as R
from mmc_core.common.errors import MMCError


@pytest.mark.parametrize(
    "message, calls", [("... 'ReferenceError: kaleido_scopes is not defined' ...", 2), ("no Chromium", 1)]
)
def test_a_page_load_race_is_retried_once_and_nothing_else(monkeypatch, message, calls):
    seen = []

    def render(fig, width, height, scale):
        seen.append(1)
        if len(seen) == 1:
            raise MMCError(message)
        return b"png"

    stopped = []
    monkeypatch.setattr(R, "_figure_to_png", render)
    monkeypatch.setattr("kaleido.stop_sync_server", lambda **k: stopped.append(1))
    if calls == 1:
        with pytest.raises(MMCError, match="no Chromium"):
            R.figure_to_png(object())
    else:
        assert R.figure_to_png(object()) == b"png"
    assert len(seen) == calls and len(stopped) == calls - 1
