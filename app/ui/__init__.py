"""Streamlit pages and helpers of the mmc-audit dashboard (entry script: ``app/dashboard.py``).

Each ``*_page.py`` module has a ``render()`` function and runs it when Streamlit executes the file as a
page (``st.Page(path)``); importing a page module has no side effects. Pure logic lives in
``app/services/pipeline.py`` and ``app/services/jobs.py`` (pipeline, background job), :mod:`app.ui.groupbuild` (group
definitions) and :mod:`app.ui.teaching_figs` (teaching-page figures), which are unit-tested without Streamlit.
"""
