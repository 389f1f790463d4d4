"""``python -m chord_core search``: one command, two searches.

    search "a man climbs the fence"            the library: every clip analysed so far
    search --rebuild                           rebuild the library index from the job store
    search VIDEO "the speaker draws a graph"   inside one long video (longvideo/cli.py)

Given one query the library is searched (``chord.library-search/v1`` JSON on stdout, or in
``--json OUT``); given a video and a query, the long-video search runs as before.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from chord_core.errors import InputError


def add_library_args(p: argparse.ArgumentParser) -> None:
    """The library's options on the ``search`` parser (whose positionals are optional)."""
    for action in p._actions:  # noqa: SLF001 — video and query: one of them, or both
        if action.dest in ("video", "query"):
            action.nargs = "?"
    p.description = __doc__.split("\n\n")[1]
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    g = p.add_argument_group("library (one query, no video)")
    g.add_argument("--rebuild", action="store_true",
                   help="rebuild the library index from the job store ($CHORD_DATA_DIR)")
    g.add_argument("--folder", default="", help="only clips in this folder or below it")
    g.add_argument("--from", dest="date_from", default="", metavar="YYYY-MM-DD",
                   help="only results made on or after this day (UTC)")
    g.add_argument("--to", dest="date_to", default="", metavar="YYYY-MM-DD",
                   help="only results made on or before this day (UTC)")
    g.add_argument("--task", default="", choices=("", "describe", "ground", "entail",
                                                  "chapters"), help="only this task's results")
    g.add_argument("--limit", type=int, default=20, help="hits to show, 1–100 (default 20)")
    g.add_argument("--check", type=int, default=0, metavar="N",
                   help="re-check the best N hits on their frames by entailment (the query "
                        "as a statement; loads the model in this process)")


def cmd_search(args: argparse.Namespace,
               long_search: Callable[[argparse.Namespace], int]) -> int:
    """The library search, the rebuild, or (video and query given) the long-video search."""
    if args.video is not None and args.query is not None:
        if args.rebuild:
            raise InputError("--rebuild takes no video or query",
                             hint="run `python -m chord_core search --rebuild` on its own")
        return long_search(args)
    from chord_core.cli.output import emit
    from chord_core.library.index import LibraryIndex
    from chord_core.library.search import Filters, search
    from chord_core.runtime.store_read import default_store_path

    q = args.video  # the one positional given
    with LibraryIndex(default_store_path()) as index:
        if args.rebuild:
            if q is not None:
                raise InputError("--rebuild takes no query",
                                 hint="run `python -m chord_core search --rebuild` on its own")
            n = index.rebuild()
            stats = index.stats()
            print(f"indexed {n} passages of {stats['clips']} clips into {index.path}",
                  file=sys.stderr)
            return 0
        if q is None:
            raise InputError("nothing to search for",
                             hint='give words, e.g. `python -m chord_core search "forklift"`, '
                                  "or a video and words to search inside one long video")
        folder = str(Path(args.folder).expanduser().resolve()) if args.folder else ""
        filters = Filters(folder=folder, date_from=args.date_from, date_to=args.date_to,
                          task=args.task)
        doc = search(index, q, filters=filters, limit=args.limit)
    if args.check > 0 and doc["hits"]:
        _check(doc, args)
    emit(doc, args.json_out)
    if not doc["hits"]:
        print("no hits (analysed clips are searched: describe, ground, entail, chapters)",
              file=sys.stderr)
    return 0


def _check(doc: dict, args: argparse.Namespace) -> None:
    """``--check N``: the best N hits re-checked by entailment, one model in this process."""
    from chord_core.config import model_config_from_env
    from chord_core.library.recheck import recheck
    from chord_core.runtime.cluster import in_process_manager

    cfg = model_config_from_env(model=args.model, device=args.device)
    manager = in_process_manager(cfg.with_overrides(compile=False))
    try:
        n = recheck(doc["hits"], doc["query"], manager, cfg.model, top=args.check)
    finally:
        manager.shutdown()
    doc["checked"] = n
