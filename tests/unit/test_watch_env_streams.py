"""``CHORD_WATCH`` stream entries (the way ``serve`` and the app are told to watch cameras):
which entries are streams, what each asks for, the settings the environment gives them, and
a clear error for a task a stream cannot run. Folders in the same variable are left to the
library's watcher."""

from __future__ import annotations

import pytest

from chord_core.errors import ConfigError
from chord_core.streams.background import is_stream_entry, streams_from_env


def test_stream_entries_take_their_task_and_the_environments_settings() -> None:
    env = {"CHORD_WATCH": "/srv/clips; rtsp://cam:pw@10.0.0.5/1|ground|a forklift ;"
                          "http://127.0.0.1:8080/live.m3u8|describe|count the people;"
                          "rtsps://door/2",
           "CHORD_WATCH_CHECKS": "a person falls; smoke", "CHORD_WATCH_THRESHOLD": "0.6",
           "CHORD_LIVE_CHUNK_S": "5", "CHORD_LIVE_MAX_GB": "1"}
    got = streams_from_env("test", env)
    assert [url for url, _ in got] == ["rtsp://cam:pw@10.0.0.5/1",
                                       "http://127.0.0.1:8080/live.m3u8", "rtsps://door/2"]
    ground, described, plain = (s for _, s in got)
    assert ground.target == "a forklift" and ground.prompt == ""
    assert described.prompt == "count the people" and described.target == ""
    assert plain.prompt == "" and plain.target == ""
    for s in (ground, described, plain):
        assert s.statements == ("a person falls", "smoke") and s.threshold == 0.6
        assert s.chunk_s == 5.0 and s.max_bytes == 2**30 and s.model == "test"
    assert not is_stream_entry("/srv/clips") and is_stream_entry("rtsp://cam/1|ground|x")


@pytest.mark.parametrize(("entry", "words"), [
    ("rtsp://cam/1|entail|a door opens", "a stream's task is describe or ground, not 'entail'"),
    ("rtsp://cam/1|chapters", "not 'chapters'"),
], ids=["entail", "chapters"])
def test_a_task_a_stream_cannot_run_is_a_clear_error(entry: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as err:
        streams_from_env(None, {"CHORD_WATCH": entry})
    assert "CHORD_WATCH_CHECKS" in err.value.hint  # where statements go instead


def test_a_bad_chunk_length_in_the_environment_is_refused() -> None:
    from chord_core.errors import InputError

    with pytest.raises((InputError, ConfigError), match="out of range|CHORD_LIVE_CHUNK_S"):
        streams_from_env(None, {"CHORD_WATCH": "rtsp://cam/1", "CHORD_LIVE_CHUNK_S": "0.1"})
