import logging

import pytest

from hpcdist import log
from hpcdist.settings import Settings


def test_defaults_env_and_arguments():
    assert Settings.from_env({}).timeout_seconds is None
    s = Settings.from_env({"HPCDIST_TIMEOUT_SECONDS": "2.5", "HPCDIST_CHECK_COLLECTIVES": "off"})
    assert s.timeout_seconds == 2.5
    assert s.check_collectives is False
    s = Settings.from_env({"HPCDIST_TIMEOUT_SECONDS": "2.5"}, timeout_seconds=9.0)
    assert s.timeout_seconds == 9.0
    assert Settings.from_env({"HPCDIST_TIMEOUT_SECONDS": "0"}).timeout_seconds is None
    assert Settings.from_env({"OTHER": "x"}).implementation == "auto"


def test_unknown_keys_are_rejected():
    with pytest.raises(ValueError, match="HPCDIST_TIMEOUT=") as info:
        Settings.from_env({"HPCDIST_TIMEOUT": "3"})
    assert "HPCDIST_TIMEOUT_SECONDS" in str(info.value)
    with pytest.raises(ValueError, match="unknown hpcdist setting"):
        Settings.from_env({}, timeout=3)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("HPCDIST_CHECK_COLLECTIVES", "maybe"),
        ("HPCDIST_TIMEOUT_SECONDS", "-1"),
        ("HPCDIST_RANKS_PER_NODE", "0"),
        ("HPCDIST_IMPLEMENTATION", "carrier-pigeon"),
        ("HPCDIST_SHM_CHUNK_BYTES", "10"),
    ],
)
def test_bad_values_name_the_variable(key, value):
    with pytest.raises(
        ValueError,
        match=key
        if key != "HPCDIST_IMPLEMENTATION" and key != "HPCDIST_SHM_CHUNK_BYTES"
        else "must",
    ):
        Settings.from_env({key: value})


def test_logger_prints_on_chief_and_prefixes_others(monkeypatch, capsys):
    logger = log.get_logger()
    monkeypatch.setattr(log, "process_rank", lambda: (0, 4))
    logger.info("hello from chief")
    monkeypatch.setattr(log, "process_rank", lambda: (2, 4))
    logger.info("hidden info")
    logger.warning("visible warning")
    err = capsys.readouterr().err
    assert "hello from chief" in err
    assert "hidden info" not in err
    assert "[rank 2/4] visible warning" in err
    assert logger.level == logging.INFO
