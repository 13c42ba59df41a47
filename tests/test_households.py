"""Household lookup: units, the last-row rule, errors. Expected values are worked out by hand
from the CSV rows quoted in each test."""

import json
import math

import pandas as pd
import pytest

from conftest import DATA_CSV
from latency_divide.data.buckets import Bucket
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
