"""The footage library: everything Chord has analysed, searchable (FTS5 in the job store's
own file), plus watched folders and their standing checks.

    passages.py   what of a stored result is searchable (pure)
    index.py      the FTS5 tables, kept current from the store by a watermark; rebuild
    search.py     words in, ranked and filtered hits out
    thumbs.py     a hit's thumbnail: one frame of the clip, as JPEG
"""
