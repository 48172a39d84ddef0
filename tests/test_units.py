"""Units as users write them: durations in words, money in US dollars (src/gpuplan/units.py)."""

import pytest


@pytest.mark.parametrize(("text", "days"), [
    # the words people write for a deadline; a month is 30 days, as the error and help say
    ("2 weeks", 14), ("14 days", 14), ("36 hours", 1.5), ("1 month", 30), ("3mo", 90), ("1.5 years", 547.5),
])
def test_durations_in_words(text, days):
    from gpuplan.units import parse_duration

    assert parse_duration(text) == pytest.approx(days * 86400)


def test_money_in_dollars_written_out_and_other_currencies_refused():
    from gpuplan.errors import GpuplanError
    from gpuplan.units import parse_money

    assert parse_money("50K USD") == parse_money("USD 50k") == parse_money("$50k") == 50_000
    for text in ("€50k", "50k EUR", "£2k"):
        with pytest.raises(GpuplanError, match="US dollars"):
            parse_money(text)
