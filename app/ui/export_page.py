"""Export page: the PDF report, predictions with intervals (CSV), the fitted model and the groups (JSON)."""

from __future__ import annotations

import json
import logging
import time

import streamlit as st

from app.services.io import csv_bytes
from app.ui import state
from app.ui.common import chosen_periods, download, esc, run_and_frame
from mmc_core.common import MMCError

log = logging.getLogger(__name__)

AUTO_CSV_ROWS = 100_000  # build the CSV without a click up to this many rows
AUTO_BASE_ROWS = 20_000  # rebuild an in-app base model for the export without a click up to this many base rows


def test_inputs(run, frame):
    """(table, label, base) of the run's test rows: what every report of the run is computed on."""
    from app.services.pipeline import audit_labels
    from app.services.run_tables import with_variance

    rows = run.split["test"]
    table = with_variance(frame.iloc[rows].reset_index(drop=True), run, rows)
    base = None if run.base is None else run.base[rows]
    return table, audit_labels(run, rows), base


def report_inputs(run, frame) -> tuple:
    """(table, label, keyword arguments) that every report of ``run`` (PDF or HTML) is built from: its test rows,
    base, settings, label name, data name and audit."""
    table, y, base = test_inputs(run, frame)
    common = dict(
        base=base,
        delta=run.settings.delta,
        gamma=run.settings.gamma,
        label=run.label.name,
        data_name=f"{run.data_name} (test rows)",
        audit=run.audit,
    )
    return table, y, common


def report_file_name(data_name: str) -> str:
    """``mmc_report_<table name without its extension>.pdf``, safe as a file name."""
    import re

    stem = re.sub(r"\.(csv|parquet|pq|txt)$", "", str(data_name), flags=re.I)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._") or "audit"
    return f"mmc_report_{stem[:80]}.pdf"


def build_pdf(run, frame, threshold: float | None = None, periods=None, period_column: str = "period") -> bytes:
    """The PDF report of ``run`` on its test rows; for a classifier, ``threshold`` is the decision threshold the
    analyst chose on the Results page (its rates are recomputed from the stored predictions, no refit).
    ``periods``: the Results page's period audit of ``period_column`` (the section "Over time"), or None."""
    from app.report.pdf import build_report_pdf
    from app.services.pipeline import classifier_rates

    table, y, common = report_inputs(run, frame)
    rates = None
    if threshold is not None and run.model.task == "binary":
        rates = (float(threshold), *classifier_rates(frame, run, threshold))
    return build_report_pdf(
        run.model,
        table,
        y,
        **common,
        units=state.units(),
        data_note=dropped_note(run),
        rates=rates,
        periods=periods,
        period_column=period_column,
    )


def _run_data(run) -> dict:
    """The data record of the table ``run`` was fitted on ({} once another table is loaded)."""
    d = state.data()
    return d if d is not None and d.get("key") == run.data_key else {}


def dropped_note(run) -> str:
    """The report's sentence on rows dropped from the file on the Data page before the run (the report names
    the file: its reader must know the rows audited are not all of it), else ""."""
    note = _run_data(run).get("note")
    if not note or "dropped" not in note:
        return ""
    return f"Rows of {run.data_name} dropped on the Data page before the run: {note}."


def pdf_threshold(run) -> float | None:
    """The decision threshold of the Results page's slider (a classifier run), else None."""
    return round(float(state.settings().res_threshold), 4) if run.model.task == "binary" else None


def build_csv(run, frame, methods, which: str, threshold: float | None = None) -> bytes:
    """predictions.csv of ``run``; for a classifier, ``mmc_decision`` at ``threshold`` (the Results page's
    slider, :func:`pdf_threshold`: the PDF's rates are at the same one)."""
    from app.services.pipeline import predictions_table

    rows = run.split["test"] if which == "test" else None
    out = predictions_table(
        frame, run, methods=methods, rows=rows, file_rows=_run_data(run).get("file_rows"), threshold=threshold
    )
    st.session_state["export_csv_prefix"] = out.attrs.get("mmc_prefix", "mmc_")
    return csv_bytes(out)


def pdf_section(run, frame):
    ss = st.session_state
    st.subheader("PDF report")
    st.caption(
        "For a review board: parameters, data summary, findings in plain language, and the figures of the "
        "Results page, computed on the test rows."
    )
    try:
        from app.report.pdf import CHROMIUM_MESSAGE, chromium_available

        chrome = chromium_available()
    except ImportError:
        chrome, CHROMIUM_MESSAGE = None, "the report module (app/report/pdf.py) is not installed"
    if not chrome:
        st.warning(f"PDF export is unavailable: {CHROMIUM_MESSAGE}.", icon=":material/warning:")
    thr = pdf_threshold(run)
    if thr is not None:
        st.caption(f"Rates and disparities at the decision threshold **{thr:g}** set on the Results page.")
    period_column, periods = chosen_periods(run)
    if periods is not None:
        st.caption(f"With the section Over time of **{esc(str(period_column))}** chosen on the Results page.")
    sig = (run.finished_at, thr, period_column)
    if ss.get("export_pdf_sig") != sig:  # a PDF built at another slider threshold is not this report
        ss.pop("export_pdf", None)
    c1, c2 = st.columns([1, 3])
    if c1.button("Build the PDF report", key="pdf_build", type="primary", icon=":material/picture_as_pdf:"):
        with st.spinner("Drawing the figures and laying out the report (a few seconds)…"):
            t = time.perf_counter()
            try:
                ss["export_pdf"] = build_pdf(run, frame, thr, periods, str(period_column))
                ss["export_pdf_sig"] = sig
                ss["export_pdf_seconds"] = time.perf_counter() - t
                ss.pop("export_pdf_error", None)
            except MMCError as e:
                ss["export_pdf_error"] = str(e)
                ss.pop("export_pdf", None)
            except ImportError as e:
                # only a missing kaleido / fpdf2 is the user's to install; any other import failure is ours
                missing = getattr(e, "name", None) in ("kaleido", "fpdf", "fpdf2")
                ss["export_pdf_error"] = (
                    f"PDF export needs the kaleido and fpdf2 packages: pip install kaleido fpdf2 ({e})"
                    if missing
                    else f"an internal import failed ({e}); restart the dashboard, and report it if it persists"
                )
                ss.pop("export_pdf", None)
            except Exception as e:  # a bug of ours: say what failed on the page, keep the traceback in the log
                log.exception("building the PDF report failed")
                ss["export_pdf_error"] = (
                    f"an internal error ({type(e).__name__}: {e}); the dashboard's log has the details, "
                    "please report it"
                )
                ss.pop("export_pdf", None)
    if ss.get("export_pdf_error"):
        st.error(f"Could not build the PDF: {esc(ss['export_pdf_error'])}", icon=":material/error:")
    if ss.get("export_pdf"):
        download(
            f"Download {report_file_name(run.data_name)}",  # the name the file is saved under
            ss["export_pdf"],
            report_file_name(run.data_name),
            "pdf_download",
            mime="application/pdf",
            where=c2,
        )
        c2.caption(f"{len(ss['export_pdf']) / 1024:,.0f} KB, built in {ss.get('export_pdf_seconds', 0):.1f} s.")


def csv_section(run, frame):
    ss = st.session_state
    from mmc_core.intervals import available_methods

    methods = list(available_methods(run.model))
    st.subheader("Predictions with intervals (CSV)" if methods else "Predictions (CSV)")
    if methods:  # a classifier (no methods) leaves the choice alone: it emptied the next regression's picker
        state.put("exp_methods", [m for m in ss.get("exp_methods", []) if m in methods])
    if methods:
        c1, c2 = st.columns([2, 1])
        c1.multiselect("Interval methods (a lower and an upper column each)", methods, **state.bind("exp_methods"))
    else:  # a classifier has no intervals: no picker of nothing, and no empty column where it would be
        c2 = st.container()
    which = c2.radio(
        "Rows",
        ["all", "test"],
        **state.bind("exp_rows"),
        horizontal=True,
        format_func=lambda w: {"all": f"all {len(frame):,} rows", "test": "test rows only"}[w],
    )
    chosen = list(ss.get("exp_methods") or []) if methods else []
    thr = pdf_threshold(run)  # a classifier's decisions at the threshold the PDF's rates are at
    sig = (run.finished_at, tuple(chosen), which, thr)
    if ss.get("export_csv_sig") != sig:  # a CSV of other rows, methods or threshold is not this export
        ss.pop("export_csv", None)
    n = len(frame) if which == "all" else run.split["test"].size
    if ss.get("export_csv") is None and n <= AUTO_CSV_ROWS:
        ss["export_csv"] = build_csv(run, frame, chosen, which, thr)
        ss["export_csv_sig"] = sig
    elif ss.get("export_csv") is None and st.button(f"Prepare the CSV ({n:,} rows)", key="csv_build"):
        with st.spinner("Computing predictions and intervals…" if methods else "Computing predictions…"):
            ss["export_csv"] = build_csv(run, frame, chosen, which, thr)
            ss["export_csv_sig"] = sig
    if ss.get("export_csv") is not None:
        download("Download predictions.csv", ss["export_csv"], "predictions.csv", "csv_download", mime="text/csv")
        if getattr(run.model, "task", "") != "binary":
            units = f"log({run.label_spec.column})" if run.label_spec.log else run.label.name
            moms = ", ".join(f"`mmc_moment_{a}`" for a in run.model.moments)
            ends = ", ".join(f"`mmc_lower_{m}` / `mmc_upper_{m}`" for m in chosen)
            cols = (
                ("`mmc_base`, " if run.base is not None else "")
                + ("`mmc_mean`, `mmc_sd`" if "moment_2" in moms else "`mmc_mean`")
                + (f" and {ends}" if ends else "")
                + f" in {units} units"
                + (f"; the central moments {moms}, each in {units} units to its power (2: squared)" if moms else "")
                + ("." if ends else ". No interval columns: choose an interval method above to add them.")
            )
        else:
            audit_thr = float(run.settings.threshold)
            where = "the decision threshold set on the Results page, as in the PDF report" + (
                f"; the audit ran at {audit_thr:g}" if thr != audit_thr else ""
            )
            cols = (
                ("`mmc_base` (the base probability), " if run.base is not None else "")
                + "`mmc_mean` (the multicalibrated probability of the positive class, in [0, 1]) and "
                f"`mmc_decision` (1 when `mmc_mean` ≥ {thr:g}, {where}). A binary label has no intervals."
            )
        prefix = ss.get("export_csv_prefix", "mmc_")
        if prefix != "mmc_":  # the table has columns of the tool's names: the tool's get another prefix
            cols = cols.replace("`mmc_", f"`{prefix}")
        st.caption(
            f"{len(ss['export_csv']) / 1e6:.1f} MB. Columns: your columns, `{prefix}file_row` (the row's number "
            "among the file's data rows, 1 = the first after the header; rows dropped on the Data page keep their "
            f"numbers), `{prefix}split` (which part of the split the row was in), {cols} Numbers are written at "
            "full precision (they read back as the same values). Text cells that would run as spreadsheet formulas "
            "are escaped."
            + (
                f" Your table already has columns named `mmc_…`: they are kept as they are, and the tool's columns "
                f"start with `{prefix}` instead."
                if prefix != "mmc_"
                else ""
            )
        )


def has_app_base_model(run) -> bool:
    """Whether ``run`` started from a base model fitted in the app (model.json alone cannot predict then)."""
    return run.base_spec.kind == "model" and run.base is not None and bool(getattr(run.model, "uses_base", False))


def model_zip(run, frame) -> bytes:
    """model.zip: model.json and base_model.skops (the in-app base model, see
    :func:`app.services.base_model_export.export_base_model`), the two files ``mmc predict --base-model`` needs."""
    import io
    import zipfile

    from app.services.base_model_export import BASE_MODEL_FILE, export_base_model

    skops_bytes = export_base_model(run, frame)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("model.json", run.model.to_json())
        z.writestr(BASE_MODEL_FILE, skops_bytes)
    return buf.getvalue()


def model_zip_section(run, frame, thr):
    """The model's download when it starts from an in-app base model: one zip with both files."""
    ss = st.session_state
    sig = (run.finished_at, run.data_key, run.split_seed)
    if ss.get("export_zip_sig") != sig:  # another run's files are not this model's
        ss.pop("export_zip", None)
        ss.pop("export_zip_error", None)
        ss["export_zip_sig"] = sig

    def build():
        try:
            ss["export_zip"] = model_zip(run, frame)
        except MMCError as e:
            ss["export_zip_error"] = str(e)
        except ImportError as e:
            ss["export_zip_error"] = f"saving the base model needs the skops package: pip install skops ({e})"

    n_base = int(run.split["base"].size)
    if ss.get("export_zip") is None and not ss.get("export_zip_error"):
        if n_base <= AUTO_BASE_ROWS:
            build()
        elif st.button(f"Prepare model.zip (fits the base model again on its {n_base:,} rows)", key="zip_build"):
            with st.spinner("Fitting the base model again on its rows…"):
                build()
    if ss.get("export_zip_error"):
        st.error(f"Could not export the base model: {esc(ss['export_zip_error'])}", icon=":material/error:")
    if ss.get("export_zip") is not None:
        download(
            "Download model.zip (model.json + base_model.skops)",
            ss["export_zip"],
            "model.zip",
            "model_zip_download",
            mime="application/zip",
        )
    feats = [f for f in run.base_spec.features if f != run.label_spec.column]
    st.caption(
        "This model starts from the base model fitted in the app, so it comes as one zip of two files: "
        "`model.json` and `base_model.skops` (the scikit-learn base model"
        + (", with the base variance model the variance starts from," if run.base_variance is not None else "")
        + " in the skops format, not pickle). "
        "Unzip it and apply both to new rows with `mmc predict --model model.json --base-model base_model.skops "
        "--data new.csv --out predictions.csv`"
        + (f" (`--threshold {thr:g}` adds the `decision` column of predictions.csv)" if thr is not None else "")
        + f". The new rows need the base model's feature columns: {esc(', '.join(map(str, feats)))}."
    )


def json_section(run, frame):
    ss = st.session_state
    st.subheader("Model and groups (JSON)")
    if ss.get("export_model") is None:
        ss["export_model"] = run.model.to_json().encode("utf-8")
    from app.ui.groupbuild import groups_file

    ss["export_groups_run"] = json.dumps(run.groups_json, indent=2).encode("utf-8")
    try:
        ss["export_groups"] = json.dumps(groups_file(ss.get("groups") or []), indent=2).encode("utf-8")
    except MMCError:
        ss["export_groups"] = ss["export_groups_run"]
    if ss.get("export_audit") is None and run.audit is not None and hasattr(run.audit, "to_json"):
        try:
            ss["export_audit"] = json.dumps(run.audit.to_json(), allow_nan=False).encode("utf-8")
        except (TypeError, ValueError):
            ss["export_audit"] = None
    c = st.columns(3)
    with c[0]:
        thr = pdf_threshold(run)
        if has_app_base_model(run):
            model_zip_section(run, frame, thr)
        else:
            download("Download model.json", ss["export_model"], "model.json", "model_download")
            notes = (["pass the base prediction with --pred"] if run.model.uses_base else []) + (
                [f"`--threshold {thr:g}` adds the `decision` column of predictions.csv"] if thr is not None else []
            )
            st.caption(
                "Apply it to new rows with `mmc predict --model model.json …`"
                + (f" ({'; '.join(notes)})." if notes else ".")
            )
    with c[1]:
        download("Download groups.json", ss["export_groups_run"], "groups.json", "groups_download")
        st.caption("The groups of this model, in the format `mmc fit --groups` reads.")
    with c[2]:
        if ss.get("export_audit"):
            download("Download audit.json", ss["export_audit"], "audit.json", "audit_download")
            st.caption("Every table of the Results page (per group, per cell), as `mmc audit` writes it.")


def render():
    st.title("Export")
    shown = run_and_frame("The table changed since this model was fitted: run the audit again to export.")
    if shown is None:
        return
    run, frame = shown
    if run.stopped or not run.converged:
        st.warning("This model did not converge (stopped early or capped): say so when you hand it on.")
    pdf_section(run, frame)
    st.divider()
    csv_section(run, frame)
    st.divider()
    json_section(run, frame)


if __name__ == "__main__":
    render()
