import logging
import math

import pytest

from hpcdist import logger as log
from hpcdist.settings import LOG_LEVELS, Settings


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
    with pytest.raises(ValueError, match=f"{key}={value!r}"):
        Settings.from_env({key: value})


@pytest.mark.parametrize("text", ["verbose", "10x", "-5", "", "LOUD"])
def test_log_level_outside_the_logging_levels_is_rejected_at_start_up(text):
    with pytest.raises(ValueError, match="HPCDIST_LOG_LEVEL=") as info:
        Settings.from_env({"HPCDIST_LOG_LEVEL": text})
    message = str(info.value)
    assert repr(text) in message and "WARNING" in message and "integer" in message
    with pytest.raises(ValueError, match="log_level"):
        Settings.from_env({}, log_level=text)


@pytest.mark.parametrize(
    ("text", "level"),
    [("debug", "DEBUG"), (" Warning ", "WARNING"), ("warn", "WARN"), ("10", 10), ("25", 25)],
)
def test_log_level_names_any_case_and_integers_are_accepted(text, level):
    settings = Settings.from_env({"HPCDIST_LOG_LEVEL": text})
    assert settings.log_level == level
    logging.getLogger("hpcdist.settings-test").setLevel(settings.log_level)  # never raises


def test_every_accepted_level_name_is_one_of_pythons():
    for name in LOG_LEVELS:
        assert isinstance(logging.getLevelName(name), int), name


@pytest.mark.parametrize("name", ["TIMEOUT_SECONDS", "STALL_WARNING_SECONDS"])
@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "-0.5", "soon", "1e999"])
def test_seconds_must_be_finite_and_non_negative(name, text):
    key = f"HPCDIST_{name}"
    with pytest.raises(ValueError, match=f"{key}={text!r}.*finite number of seconds >= 0"):
        Settings.from_env({key: text})


@pytest.mark.parametrize("text", ["0", "0.0", "0e3", "-0", " 0 ", "none", "None", ""])
def test_zero_seconds_means_none_however_spelled(text):
    settings = Settings.from_env(
        {"HPCDIST_TIMEOUT_SECONDS": text, "HPCDIST_STALL_WARNING_SECONDS": text}
    )
    assert settings.timeout_seconds is None and settings.stall_warning_seconds is None


@pytest.mark.parametrize("value", [0, 0.0])
def test_zero_seconds_argument_means_none_too(value):
    assert Settings.from_env({}, timeout_seconds=value).timeout_seconds is None
    assert Settings(stall_warning_seconds=value).stall_warning_seconds is None


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, True, "soon"])
def test_seconds_arguments_follow_the_same_rule(value):
    with pytest.raises(ValueError, match=r"timeout_seconds=.*finite number of seconds"):
        Settings.from_env({}, timeout_seconds=value)
    with pytest.raises(ValueError, match="stall_warning_seconds="):
        Settings(stall_warning_seconds=value)


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("HPCDIST_BYTES_PER_PACK", "4.0"),
        ("HPCDIST_BYTES_PER_PACK", "-1"),
        ("HPCDIST_BYTES_PER_PACK", "nan"),
        ("HPCDIST_SHM_MIN_BYTES", "1e6"),
        ("HPCDIST_PS_SEGMENT_BYTES", "4095"),
        ("HPCDIST_NUM_PS", "0"),
        ("HPCDIST_NUM_PS", "1.5"),
        ("HPCDIST_GPU", "inf"),
        ("HPCDIST_RANKS_PER_NODE", "two"),
    ],
)
def test_integer_settings_take_integers_only(key, text):
    with pytest.raises(ValueError, match=f"{key}={text!r}.*an integer >="):
        Settings.from_env({key: text})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("bytes_per_pack", 4.0),
        ("bytes_per_pack", -1),
        ("shm_chunk_bytes", 10),
        ("ps_segment_bytes", True),
        ("num_ps", 0),
        ("gpu", -1),
        ("ranks_per_node", "two"),
    ],
)
def test_integer_arguments_follow_the_same_rule(name, value):
    with pytest.raises(ValueError, match=f"{name}={value!r}.*an integer >="):
        Settings.from_env({}, **{name: value})


def test_valid_values_are_normalised():
    s = Settings.from_env(
        {
            "HPCDIST_BYTES_PER_PACK": " 1024 ",
            "HPCDIST_NUM_PS": "none",
            "HPCDIST_GPU": "",
            "HPCDIST_IMPLEMENTATION": " SHM ",
            "HPCDIST_ABORT_ON_EXCEPTION": "No",
        }
    )
    assert (s.bytes_per_pack, s.num_ps, s.gpu, s.implementation) == (1024, None, None, "shm")
    assert s.abort_on_exception is False
    with pytest.raises(ValueError, match="check_collectives='maybe'"):
        Settings(check_collectives="maybe")


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


def test_one_setting_reads_its_own_variable_alone():
    environ = {"HPCDIST_KEEP_FREED_MEMORY": "0", "HPCDIST_NO_SUCH_SETTING": "x"}
    assert Settings.one("keep_freed_memory", environ) is False
    assert Settings.one("count_messages", environ) is False  # default; the stranger is ignored
    with pytest.raises(ValueError, match="HPCDIST_COUNT_MESSAGES='maybe'"):
        Settings.one("count_messages", {"HPCDIST_COUNT_MESSAGES": "maybe"})
