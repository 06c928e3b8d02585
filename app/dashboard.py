"""The mmc-audit dashboard (Streamlit entry script).

Started by ``mmc dashboard [--data FILE]``, which runs ``streamlit run app/dashboard.py -- [--data FILE]``.
Without ``--data`` it opens on the bundled demo table ``synthetic_scores`` and runs its audit once, so a
newcomer sees a complete audit right away.

Pages (``st.navigation``): Data, Groups, Run, Results, Export (the audit workflow), Teaching and About.
The pages live in ``app/ui/*_page.py``; the heavy lifting is in ``app/services/pipeline.py`` and its neighbours
(``app/services/runner.py`` re-exports them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
# `streamlit run` puts this script's folder (app/) first on sys.path, where app/services/io.py would shadow the
# standard library's io module for any later import. Drop it, and make sure the package root is importable.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
if str(_HERE.parent) not in sys.path:
    sys.path.append(str(_HERE.parent))

import streamlit as st  # noqa: E402

from app.services.jobs import debug as _debug  # noqa: E402
from app.services.jobs import prewarm  # noqa: E402
from app.services.specs import count  # noqa: E402
from app.ui import persist, state  # noqa: E402
from app.ui.common import esc  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    """``--data FILE`` after ``--``; anything else is ignored (Streamlit or pytest arguments)."""
    if argv is None:
        argv = sys.argv[1:] if sys.argv and Path(sys.argv[0]).name == "dashboard.py" else []
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--data")
    args, _ = p.parse_known_args(argv)
    return args


def sidebar(box):
    """The status box: current table, label, groups and model (drawn after the page, so it is up to date)."""
    ss = st.session_state
    d = state.data()
    with box:
        st.markdown("### mmc-audit")
        st.caption("Moment multicalibration: are the model's means *and* uncertainties right for every group?")
        if d is None:
            st.info("No data loaded.")
            return
        run = ss.get("run")
        job = ss.get("job")
        running = job is not None and job.running
        n_groups = len(ss.get("groups") or []) + 1
        s = state.settings()
        lines = [
            f"**Data:** {esc(d['name'])}  \n{d['rows']:,} rows × {d['cols']} columns",
            f"**Label:** {esc(s.label_col) if s.label_col else '(not chosen)'}" + (" (log)" if s.label_log else ""),
            f"**Groups:** {n_groups} (incl. *all*)",
            f"**Model:** {state.status_line()}",
        ]
        if run is not None and not running:  # during a run the previous run's counts would mislead
            info = run.model.info
            lines.append(
                f"{count(info.get('rounds'), 'round')}, {count(info.get('mean_updates'), 'mean update')}, "
                f"{count(info.get('moment_updates'), 'moment update')}"
            )
        st.markdown("  \n".join(lines))
        if running and job.stop_requested:
            st.caption("Stop pressed: the fit is ending; the Run page says what is kept.")
        elif running:  # no elapsed time: this box is not redrawn while the Run page's live view ticks
            st.caption("See the Run page to watch the fit or stop it.")


def page_icon():
    """The favicon as an image drawn here. A ``:material/...:`` icon or an emoji makes the browser fetch the
    favicon from an outside host (fonts.gstatic.com / a CDN); an image is served by the dashboard itself."""
    import numpy as np
    from PIL import Image

    px = np.full((32, 32, 3), 255, dtype=np.uint8)
    px[2:30, 2:30] = (0, 114, 178)  # Okabe-Ito blue
    for i, h in enumerate((10, 18, 24, 14)):  # four bars: groups' levels
        x = 6 + 5 * i
        px[28 - h : 28, x : x + 3] = (255, 255, 255)
    return Image.fromarray(px)


def main():
    _debug("script run start")
    st.set_page_config(
        page_title="mmc-audit: moment multicalibration",
        page_icon=page_icon(),
        layout="wide",
        initial_sidebar_state="expanded",
    )
    args = parse_args()
    restored = persist.attach()  # a reload takes back the session's work (its address carries the workspace id)
    state.keep_widget_state()  # first: restore settings Streamlit dropped, before defaults fill the gaps
    state.init_session(args.data)
    dropped = st.session_state.pop("ws_dropped", False)
    if dropped:
        why = (
            "the server keeps the most recent sessions' tables only, to stay within its memory"
            if dropped == "memory"
            else "this server does not have it: work is kept in the server's memory only, so a restart loses it "
            "(or the address is not one of its sessions)"
        )
        st.toast(
            f"The work saved under this address is no longer kept ({why}): this is a new session.",
            icon=":material/history:",
        )
    if restored:
        d = state.data()
        st.toast(
            # (a reload, or a second tab opened on the address: "after the reload" was wrong for the latter;
            # the groups counted as the sidebar counts them)
            f"Your work is back: {esc(d['name']) if d else 'the table'}, "
            f"{len(st.session_state.get('groups') or []) + 1} groups (incl. all) and the settings"
            + (", and the result" if st.session_state.get("run") is not None else "")
            + ".",
            icon=":material/history:",
        )
    if persist.take_catch_up_notice():
        st.toast(
            "Work saved under this address after this page opened (a step that finished after a reload of the "
            "page) is shown now.",
            icon=":material/history:",
        )
    if persist.take_fork_notice():
        st.toast(
            "This address is open in another tab too: this tab now has an address of its own, so neither tab "
            "overwrites the other's work.",
            icon=":material/tab_duplicate:",
        )
    ui = _HERE / "ui"
    pages = {
        "Audit": [
            st.Page(
                str(ui / "data_page.py"), title="Data", icon=":material/table_view:", url_path="data", default=True
            ),
            st.Page(str(ui / "groups_page.py"), title="Groups", icon=":material/groups:", url_path="groups"),
            st.Page(str(ui / "run_page.py"), title="Run", icon=":material/play_circle:", url_path="run"),
            st.Page(str(ui / "results_page.py"), title="Results", icon=":material/insights:", url_path="results"),
            st.Page(str(ui / "export_page.py"), title="Export", icon=":material/download:", url_path="export"),
            st.Page(str(ui / "compare_page.py"), title="Compare", icon=":material/compare_arrows:", url_path="compare"),
        ],
        "Learn": [
            st.Page(str(ui / "teaching_page.py"), title="Teaching mode", icon=":material/school:", url_path="teaching"),
            st.Page(str(ui / "about_page.py"), title="About", icon=":material/help:", url_path="about"),
        ],
    }
    nav = st.navigation(pages)
    from app.ui import run_page

    # The first visit runs the bundled demo audit once (well under a second), so every page has something to show.
    if st.session_state.pop("autorun", False):
        run_page.run_now(sync=True)
    run_page.finalize()  # a background fit that ended while another page was shown: keep its result
    box = st.sidebar.container()
    nav.run()
    sidebar(box)
    state.save_widget_state()
    persist.save()
    prewarm()  # after the first page is drawn: scikit-learn and the worker's fork server, in the background
    _debug("script run end")


if __name__ == "__main__":  # `streamlit run` (and AppTest) execute this file as __main__
    main()
