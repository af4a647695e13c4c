import pytest

from snapfit.datasets.criteo_like import make_criteo_like_parquet


@pytest.fixture(scope="session")
def small_parquet(tmp_path_factory):
    """20k Criteo-like rows, 2^14 features, 20 row groups of 1000 rows."""
    path = tmp_path_factory.mktemp("stream") / "d20k.parquet"
    make_criteo_like_parquet(path, 20_000, seed=1, hash_bits=14, row_group_rows=1000)
    return str(path)
