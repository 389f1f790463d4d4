"""``python -m chord_core review`` and ``python -m chord_core ask``.

    review                                 the review items, newest first (JSON on stdout)
    review --unreviewed --severity alert   filtered (also --source DIR, --statement WORDS,
                                           --day YYYY-MM-DD)
    review --mark a12 a13 --by ana         mark items reviewed (--unmark takes it off)
    review --mark-all --source DIR         every unreviewed item passing the filters
    review --case "yard night" a12 a13     put items into a case; --export DIR [--zip]
                                           writes the case (clips, stills, JSON, reports)
    review --case NAME --job ID --start 4 --end 9
                                           a span of a done job's clip into the case
    ask "is a forklift in the walkway?"    search the library, check the best hits on their
                                           frames (loads the model here), answer with
                                           clip@time citations (chord.ask/v1)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable


def add_parsers(sub: Any, model_args: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("review", help="list, mark and export the review items (alerts of "
                                      "standing checks, detections of watched targets)",
                       description=__doc__.split("\n\n")[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ids", nargs="*", help="item ids (with --mark, --unmark or --case)")
    p.add_argument("--source", default="", help="only items of clips in this folder")
    p.add_argument("--severity", default="", choices=("", "alert", "detection"))
    p.add_argument("--statement", default="", help="only items whose statement has these words")
    p.add_argument("--day", default="", metavar="YYYY-MM-DD", help="only items of this day (UTC)")
    p.add_argument("--unreviewed", action="store_true", help="only items not reviewed yet")
    p.add_argument("--limit", type=int, default=200, help="items to list, 1–1000")
    p.add_argument("--mark", action="store_true", help="mark the ids reviewed")
    p.add_argument("--unmark", action="store_true", help="take the ids' marks off")
    p.add_argument("--mark-all", action="store_true", help="mark every listed item reviewed")
    p.add_argument("--by", default="", help="who reviewed (kept with the mark)")
    p.add_argument("--case", default="", help="a case name: the ids go into it")
    p.add_argument("--job", default="", metavar="ID",
                   help="with --case: a done job whose clip the --start/--end span is cut from")
    p.add_argument("--start", type=float, default=None, metavar="S", help="span start (s)")
    p.add_argument("--end", type=float, default=None, metavar="S", help="span end (s)")
    p.add_argument("--export", default="", metavar="DIR", help="write the --case under DIR")
    p.add_argument("--zip", action="store_true", help="as a ZIP (with --export)")
    p.add_argument("--json", dest="json_out", default=None, metavar="OUT")
    a = sub.add_parser("ask", help="ask across the library: search, check the best hits on "
                                   "their frames, answer with clip@time citations")
    a.add_argument("question")
    a.add_argument("--check", type=int, default=5, help="hits checked on their frames (1–20)")
    a.add_argument("--candidates", type=int, default=20, help="search hits to choose from")
    a.add_argument("--threshold", type=float, default=0.5,
                   help="P(entailment) at which a checked moment supports the answer")
    a.add_argument("--json", dest="json_out", default=None, metavar="OUT")
    model_args(a)


def cmd_review(args: argparse.Namespace) -> int:
    from chord_core.cli.output import emit
    from chord_core.errors import InputError
    from chord_core.library import review
    from chord_core.library.index import LibraryIndex
    from chord_core.runtime.store_read import default_store_path

    filters = review.ReviewFilters(args.source, args.severity,
                                   False if args.unreviewed else None, args.statement, args.day)
    with LibraryIndex(default_store_path()) as index:
        if args.mark or args.unmark:
            n = review.mark(index, args.ids, reviewed=not args.unmark, by=args.by)
            print(f"{n} item(s) {'un' if args.unmark else ''}marked", file=sys.stderr)
        elif args.mark_all:
            n = review.mark_all(index, filters, by=args.by)
            print(f"{n} item(s) marked reviewed", file=sys.stderr)
        elif args.case:
            return _case(index, args)
        elif args.ids or args.export or args.job:
            raise InputError("ids, --job or --export given without --mark, --unmark or --case",
                             hint="e.g. `review --mark a12` or `review --case NAME a12`")
        doc = review.listing(index, filters, limit=args.limit)
    emit(doc, args.json_out)
    return 0


def _case(index: Any, args: argparse.Namespace) -> int:
    from chord_core.library import cases, review
    from chord_core.library.case_export import export_case

    wanted = set(review.check_ids(args.ids)) if args.ids else set()
    by_id = {i["id"]: i for i in review.items(index, limit=review.MAX_ITEMS)}
    missing = sorted(wanted - set(by_id))
    if missing:
        from chord_core.errors import InputError

        raise InputError(f"no review item {missing[0]}",
                         hint="list them with `python -m chord_core review`")
    added = sum(cases.add_review_item(index, args.case, by_id[i]) for i in sorted(wanted))
    if args.job:
        added += _job_span(index, args)
    print(f"{added} moment(s) added to case {args.case!r}", file=sys.stderr)
    if args.export:
        out = export_case(index, args.case, args.export, as_zip=args.zip)
        print(f"case written to {out}", file=sys.stderr)
    return 0


def _job_span(index: Any, args: argparse.Namespace) -> int:
    from chord_core.errors import InputError
    from chord_core.library import cases

    if args.start is None or args.end is None:
        raise InputError("--job needs --start and --end (seconds of its clip)",
                         hint="e.g. `review --case NAME --job ID --start 4 --end 9`")
    return int(cases.add_job_span(index, args.case, args.job, args.start, args.end))


def cmd_ask(args: argparse.Namespace) -> int:
    from chord_core.cli.output import emit
    from chord_core.config import model_config_from_env
    from chord_core.library.ask import ask, check_args
    from chord_core.library.index import LibraryIndex
    from chord_core.runtime.cluster import in_process_manager
    from chord_core.runtime.store_read import default_store_path

    check_args(args.question, args.check, args.candidates, args.threshold)  # before a load
    cfg = model_config_from_env(model=args.model, device=args.device)
    manager = in_process_manager(cfg.with_overrides(compile=False))
    try:
        with LibraryIndex(default_store_path()) as index:
            doc = ask(index, args.question, manager, cfg.model, check=args.check,
                      candidates=args.candidates, threshold=args.threshold)
    finally:
        manager.shutdown()
    emit(doc, args.json_out)
    print(doc["answer"], file=sys.stderr)
    return 0
