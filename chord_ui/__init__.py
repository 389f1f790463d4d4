"""chord_ui — the Streamlit side of Chord: cached resources, Plotly figures and page sections.

    app.py ─▶ st.navigation ─▶ views/analyze.py, batch.py, history.py, gpus.py
                               (thin: widgets → chord_ui sections → chord_core)
                                   │
    chord_ui.resources   the ONLY home of st.cache_resource (job manager and its workers,
                         store, GPU sampler, downloads, renders)
    chord_ui.figures     pure Plotly builders (no Streamlit), unit-testable
    chord_ui.formatting  pure text helpers (durations, sizes, stage labels, plans)
    chord_ui.uploads     uploaded bytes → data dir, named by content hash
    chord_ui.model_panel / inputs / progress / results / gpu_view   page sections

Nothing here imports torch or transformers; the engine loads them in the worker processes.
"""
