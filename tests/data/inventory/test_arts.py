"""The ARTS field table, UID rule and base-map dates (rtscore.data.inventory.arts)."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from rtscore.data.inventory.arts import (
    ABBREVIATIONS,
    ALL_FIELDS,
    DateError,
    arts_columns,
    arts_uid,
    missing_required,
    parse_date_range,
)

FIELDS = {
    "CentroidLat": 71.896594,
    "CentroidLon": -120.66907384,
    "RegionName": "Banks Island",
    "CreatorLab": "A Lab",
    "BaseMapDate": "2020-07-05,2020-08-20",
    "BaseMapSource": "PlanetScope",
    "BaseMapResolution": 3.0,
    "TrainClass": "Positive",
    "LabelType": "Polygon",
}


def test_the_uid_is_uuid5_of_the_required_fields_written_as_arts_writes_them() -> None:
    literal = "71.89659-120.66907Banks IslandA Lab2020-07-05,2020-08-20PlanetScope3PositivePolygon"
    assert arts_uid(FIELDS) == str(uuid.uuid5(uuid.NAMESPACE_DNS, literal))
    assert arts_uid({**FIELDS, "BaseMapResolution": 0.5}) == str(
        uuid.uuid5(uuid.NAMESPACE_DNS, literal.replace("PlanetScope3", "PlanetScope0.5"))
    )


def test_abbreviated_names_map_to_the_full_ones_and_full_names_win() -> None:
    assert len(set(ABBREVIATIONS.values())) == len(ALL_FIELDS)
    assert all(len(a) <= 10 for a in ABBREVIATIONS.values())
    cols = ["CntrdLt", "CntrdLn", "ReginNm", "CretrLb", "BasMpDt", "BsMpSrc", "BsMpRsl", "TrnClss", "LablTyp", "UID"]
    assert missing_required(cols) == []
    assert arts_columns([*cols, "TrainClass"])["TrainClass"] == "TrainClass"
    assert missing_required(["TrnClss", "RegionName"])[:2] == ["CentroidLat", "CentroidLon"]


def test_base_map_dates_one_day_a_range_unpadded_and_refused() -> None:
    r = parse_date_range("2019-07-01,2019-08-15")
    assert (r.start, r.end) == (dt.date(2019, 7, 1), dt.date(2019, 8, 15))
    assert r.age_days(dt.date(2019, 7, 20)) == 0 and r.age_days(dt.date(2020, 8, 15)) == 366
    assert parse_date_range("2019-7-5").text() == "2019-07-05"
    for bad in ("2019-7-5", "2019/07/05", "", "2019-08-01,2019-07-01", "2019-02-30", "2019-07-01,,2019-07-02"):
        with pytest.raises(DateError):
            parse_date_range(bad, strict=True)
