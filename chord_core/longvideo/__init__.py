"""Long-video mode: hour-long clips as chunks, chapters, search over time and long grounding.

Above the engine and the runtime (it imports them; they never import it):

    settings   when the mode starts (``CHORD_LONG_VIDEO_S`` / ``--long-after``), chunk sizes
    stream     frames decoded + resized on the fly through a bounded queue
    scenes     scene cuts from histograms of the low-resolution stream (every frame or keyframes)
    chunks     cuts → chunks with exact container times; a chunk's sampling plan
    runs       chunk jobs through JobManager (worker processes, or one thread in-process), kept in the job store (resume)
    eta        the time left from the finished chunks' own pace, counted down between them
    chapters   map (describe chunks) → chapters → overall summary (reduce, same model)
    search     "when does X happen?": chapters narrowed by text, frames checked (entail/ground)
    ground     a target over the whole clip in chunks; tracks joined across chunk boundaries
    exports    chapters as JSON, WebVTT, SRT, Markdown
    cli        the ``chapters`` / ``search`` / ``ground-long`` subcommands

Importing this package is cheap (no torch, no OpenCV).
"""

from __future__ import annotations

from chord_core.longvideo.settings import LongVideoSettings, settings_from_env

__all__ = ["LongVideoSettings", "settings_from_env"]
