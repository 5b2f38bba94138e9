"""tessel.median (tessel/core/median.h): the one median of tessel, numpy.median's meaning."""

import math

import numpy as np
import pytest

import tessel


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 10])
def test_median_matches_numpy(count):
    rng = np.random.default_rng(count)
    values = rng.normal(size=count).tolist()
    assert tessel.median(values) == np.median(values)


def test_median_of_an_even_count_is_the_mean_of_the_middle_two():
    assert tessel.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert tessel.median([0.5, 0.25]) == 0.375
    assert tessel.median([3, 1, 2]) == 2.0  # integers convert


def test_median_with_nan_is_nan_as_numpy():
    assert math.isnan(tessel.median([1.0, float("nan"), 2.0]))
    assert math.isnan(np.median([1.0, float("nan"), 2.0]))


def test_median_of_no_values_is_a_value_error():
    with pytest.raises(ValueError, match="median: no values"):
        tessel.median([])
    with pytest.raises(tessel.InvalidArgumentError):
        tessel.median([])
