"""Household lookup: units, the last-row rule, errors. Expected values are worked out by hand
from the CSV rows quoted in each test."""

import json
import math

import pandas as pd
import pytest

from conftest import DATA_CSV
from latency_divide.data.buckets import PAPER_IDS, Bucket
from latency_divide.errors import HouseholdError
from latency_divide.data.households import (
    Household,
    get_household,
    households_frame,
    read_record,
    write_record,
    write_table,
)
from latency_divide.data.source import kbit_from_bytes_per_s, load_rows, valid_ids

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared


def test_household_11406_in_our_units():
    # CSV row 180: unit_id 11406, CABLE, Time Warner Cable, HI, 2015, advertised 3/1 Mbit/s,
    # medianUp 143835.5 B/s, medianDown 437324.5 B/s, medianLatency 67222 us,
    # jitter up/down 3127/878 us, medianLoss 0, monthly.charge 6.99, weight 9.6109914055491
    h = get_household(11406)
    assert h.unit_id == 11406
    assert (h.technology, h.isp, h.state, h.year) == ("CABLE", "Time Warner Cable", "HI", 2015)
    assert h.upload_kbps == 1150  # 143835.5 * 0.008 = 1150.684 -> 1150
    assert h.download_kbps == 3498  # 437324.5 * 0.008 = 3498.596 -> 3498
    assert h.rtt_ms == pytest.approx(67.222)  # 67222 / 1000
    assert h.jitter_up_ms == pytest.approx(3.127)
    assert h.jitter_down_ms == pytest.approx(0.878)
    assert h.loss_pct == 0.0
    assert h.monthly_charge == pytest.approx(6.99)
    assert h.price_bucket == "0-30"
    assert (h.advertised_down_mbps, h.advertised_up_mbps) == (3.0, 1.0)
    assert h.weight == pytest.approx(9.6109914055491)
    assert isinstance(h.upload_kbps, int) and isinstance(h.download_kbps, int)


def test_last_row_wins_for_a_duplicated_id():
    # unit_id 405 has two rows: 2014 (medianUp 51631, $49.00) then 2015 (medianUp 51128, $64.99).
    rows = [r for r in load_rows() if r["unit_id"] == 405]
    assert [r["year"] for r in rows] == [2014, 2015]
    h = get_household(405)
    assert h.year == 2015
    assert h.monthly_charge == pytest.approx(64.99)
    assert h.upload_kbps == 409  # 51128 * 0.008 = 409.024
    assert h.price_bucket == "50+"  # the first row ($49.00) would have been 40-50


def test_paper_household_with_two_rows():
    # 32648 (published in bucket $0-30) has two rows; the last is the household.
    rows = [r for r in load_rows() if r["unit_id"] == 32648]
    assert len(rows) == 2
    h = get_household(32648)
    assert h.year == rows[-1]["year"]
    assert h.monthly_charge == rows[-1]["monthly.charge"]
    assert h.price_bucket == "0-30"


def test_last_row_rule_matches_pandas_for_every_household():
    # An independent implementation of the rule: pandas' drop_duplicates(keep="last").
    df = pd.read_csv(DATA_CSV).drop_duplicates("unit_id", keep="last")
    assert valid_ids() == df["unit_id"].tolist()  # same IDs, same (file) order
    for row in df.sample(300, random_state=0).to_dict("records"):
        h = get_household(row["unit_id"])
        assert h.year == row["year"]
        assert h.monthly_charge == row["monthly.charge"]
        assert h.upload_kbps == int(row["medianUp"] * 0.008)
        assert h.download_kbps == int(row["medianDown"] * 0.008)
        assert h.rtt_ms == row["medianLatency"] / 1000


def test_rate_conversion_agrees_with_value_times_0008_on_every_row():
    for r in load_rows():
        assert kbit_from_bytes_per_s(r["medianUp"]) == int(r["medianUp"] * 0.008)
        assert kbit_from_bytes_per_s(r["medianDown"]) == int(r["medianDown"] * 0.008)
    assert kbit_from_bytes_per_s(125_000) == 1000
    assert kbit_from_bytes_per_s(124_999.5) == 999


def test_unknown_id_names_it_and_suggests_five_valid_ids():
    with pytest.raises(HouseholdError) as e:
        get_household(123)
    msg = str(e.value)
    assert "123" in msg
    suggested = [int(x) for x in msg.rsplit(":", 1)[1].split(",")]
    assert len(suggested) == 5
    ids = set(valid_ids())
    assert all(s in ids for s in suggested)


@pytest.mark.parametrize("bad", ["abc", "-5", "1.5", "", " ", "12a", "١٢", -5, True])
def test_malformed_ids(bad):
    with pytest.raises(HouseholdError) as e:
        get_household(bad)
    assert repr(bad) in str(e.value)
    assert "non-negative integer" in str(e.value)


def test_string_id_with_spaces_is_accepted():
    assert get_household(" 11406 ").unit_id == 11406


def test_price_bucket_follows_given_buckets():
    custom = [Bucket("cheap", 0, 10, ()), Bucket("rest", 10, None, ())]
    assert get_household(11406, buckets=custom).price_bucket == "cheap"
    assert get_household(11406, buckets=[Bucket("x", 50, None, ())]).price_bucket is None


def test_record_json_round_trip_and_table(tmp_path):
    out = tmp_path / "h" / "11406.json"
    h = write_record(11406, out)
    d = json.loads(out.read_text())
    assert list(d) == [f for f in Household.__dataclass_fields__]
    assert read_record(out) == h
    assert not list(out.parent.glob(".*tmp*"))  # the temp file was renamed

    recs = [h, get_household(405)]
    table = tmp_path / "t" / "households.parquet"
    write_table(recs, table)
    back = pd.read_parquet(table)
    assert back["unit_id"].tolist() == [11406, 405]
    assert list(back.columns) == list(households_frame(recs).columns)
    assert back.loc[0, "upload_kbps"] == 1150
    assert math.isclose(back.loc[1, "monthly_charge"], 64.99)


def test_table_rejects_repeated_households(tmp_path):
    h = get_household(11406)
    with pytest.raises(HouseholdError, match="repeated"):
        write_table([h, h], tmp_path / "t.parquet")
    assert not (tmp_path / "t.parquet").exists()


def test_record_with_unknown_keys_is_rejected():
    d = get_household(11406).to_dict()
    d["extra"] = 1
    with pytest.raises(HouseholdError, match="extra"):
        Household.from_dict(d)


#: The link profiles of the paper's 38 households (EXPERIMENT.md's sample, in its order), as
#: the default run emulates them: (unit_id, $/month, down kbit/s, up kbit/s, RTT ms). Pinned,
#: so a change of the data set or of its reading that changes the default run fails here
#: (11406's row is worked out by hand above).
PAPER_PROFILES = [
    # $0-30
    (799254, 14.99, 3562, 1091, 26.2835),
    (11406, 6.99, 3498, 1150, 67.222),
    (13570, 14.99, 2106, 1124, 25.199),
    (7884, 14.99, 3514, 909, 24.7895),
    (797760, 9.99, 3497, 1154, 26.237),
    (13013, 14.99, 3205, 1059, 18.655),
    (28928, 29.95, 4882, 974, 17.166),
    (9747, 14.99, 3296, 1167, 13.062),
    (799322, 29.0, 1906, 711, 59.7625),
    (32648, 9.99, 2287, 1204, 28.128),
    # $30-40
    (9254, 39.99, 4523, 933, 33.4095),
    (615514, 39.95, 3306, 888, 18.812),
    (615016, 39.95, 3560, 901, 11.845),
    (12512, 30.49, 2805, 726, 31.761),
    (6046, 39.99, 11338, 1141, 33.537),
    (216020, 37.99, 2581, 307, 44.669),
    (10232, 37.99, 1689, 649, 164.8125),
    (10428, 37.99, 3694, 726, 49.183),
    (10373, 30.49, 2803, 732, 39.367),
    (615520, 39.95, 3504, 898, 24.8585),
    # $40-50
    (27082, 42.99, 19109, 6198, 22.724),
    (5781, 49.99, 15874, 1046, 27.252),
    (12334, 47.99, 7012, 1153, 10.5625),
    (619832, 42.99, 12732, 668, 37.06),
    (1290, 49.99, 16091, 1129, 15.5945),
    (12491, 49.99, 15872, 1054, 14.941),
    (9960, 49.95, 7407, 792, 23.888),
    (13133, 49.99, 18337, 5069, 12.068),
    (215248, 46.99, 18136, 1873, 29.6885),
    # $50+
    (8268, 77.99, 36875, 6133, 25.657),
    (214030, 77.99, 29101, 5395, 18.383),
    (5749, 66.95, 29392, 5937, 22.6165),
    (12430, 59.99, 64925, 4225, 29.2745),
    (27337, 59.95, 56420, 5709, 17.263),
    (11750, 67.99, 20469, 2189, 28.1615),
    (734, 65.0, 22769, 1886, 28.332),
    (32501, 106.99, 33829, 5618, 36.022),
    (12251, 67.99, 24582, 2497, 24.946),
]


def test_the_papers_households_are_pinned():
    assert [p[0] for p in PAPER_PROFILES] == [h for ids in PAPER_IDS.values() for h in ids]
    got = [(h.unit_id, h.monthly_charge, h.download_kbps, h.upload_kbps, h.rtt_ms)
           for h in (get_household(p[0]) for p in PAPER_PROFILES)]
    assert got == PAPER_PROFILES
