"""train.fit_batch: an update in as few batches as the GPU holds (the search; the GPU's own
answers come from `fits_on_gpu`, measured by bench/gpu_check.py on a GPU)."""

from __future__ import annotations

import dataclasses

import pytest

from nmt_cli.config import TrainConfig
from nmt_cli.training.batch_fit import fitted, probe_batch

RECIPE = TrainConfig(max_tokens=3125, update_freq=8, update_tokens=25000, fit_batch=True)


def holding(limit: int, asked: list[int]):
    """A GPU that holds batches of up to `limit` tokens; records the sizes tried."""

    def fits(tokens: int) -> bool:
        asked.append(tokens)
        return tokens <= limit

    return fits


def test_one_gpu_with_room_takes_the_whole_update_in_one_batch():
    asked: list[int] = []
    tc = fitted(RECIPE.for_processes(1), 1, holding(10**9, asked))
    assert (tc.max_tokens, tc.update_freq) == (25000, 1)
    assert asked == [25000]


def test_a_smaller_gpu_takes_the_fewest_batches_that_fit():
    asked: list[int] = []
    tc = fitted(RECIPE.for_processes(1), 1, holding(10000, asked))
    assert (tc.max_tokens, tc.update_freq) == (8334, 3)
    assert asked == [25000, 12500, 8334]  # largest first, and no further once one fits


def test_eight_gpus_keep_the_papers_batch_and_try_nothing():
    asked: list[int] = []
    tc = fitted(RECIPE.for_processes(8), 8, holding(10**9, asked))
    assert (tc.max_tokens, tc.update_freq) == (3125, 1)
    assert asked == []


def test_two_gpus_hold_half_the_update_each():
    tc = fitted(RECIPE.for_processes(2), 2, holding(10**9, []))
    assert (tc.max_tokens, tc.update_freq) == (12500, 1)


def test_a_gpu_that_holds_no_more_than_the_recipes_batch_keeps_the_recipe():
    asked: list[int] = []
    tc = fitted(RECIPE.for_processes(1), 1, holding(3125, asked))
    assert tc == RECIPE.for_processes(1)
    assert min(asked) > 3125  # never a batch below the recipe's


def test_without_update_tokens_nothing_changes():
    plain = dataclasses.replace(RECIPE, update_tokens=0, update_freq=2)
    assert fitted(plain, 1, holding(10**9, [])) == plain


@pytest.mark.parametrize("processes", [1, 2, 3, 8])
@pytest.mark.parametrize("limit", [4000, 9000, 13000, 30000])
def test_a_fitted_config_read_again_gives_the_same_batches(processes, limit):
    """config.toml records the fitted max_tokens; a resumed run recomputes update_freq from it."""
    tc = fitted(RECIPE.for_processes(processes), processes, holding(limit, []))
    assert tc.for_processes(processes) == tc
    assert tc.max_tokens * tc.update_freq * processes >= RECIPE.update_tokens


def test_the_probe_batch_has_the_longest_width_within_its_tokens():
    batch = probe_batch(25000, 251, 1000, multiple=1)
    rows, width = batch["src"].shape
    assert width == 251 and batch["tgt_in"].shape == (rows, 251)
    assert rows * width <= 25000 < (rows + 1) * width
    assert probe_batch(100, 251, 1000, multiple=8)["src"].shape == (1, 104)  # one row, as long as fits
