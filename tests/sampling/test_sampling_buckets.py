"""Bucket sizes, left padding, positions and SamplingConfig validation."""

import numpy as np
import pytest

from botjax.sampling import SamplingConfig, bucket_size, left_pad, positions_from_mask


def test_bucket_size_powers_of_two_and_explicit_buckets():
  assert [bucket_size(n, minimum=16) for n in (1, 16, 17, 100)] == [16, 16, 32, 128]
  assert bucket_size(5, (4, 8, 12)) == 8
  assert bucket_size(12, (4, 8, 12)) == 12
  # Batch buckets stay divisible by the number of batch shards.
  assert bucket_size(3, multiple_of=8) == 8
  assert bucket_size(3, (2, 4, 6, 8), multiple_of=3) == 6
  with pytest.raises(ValueError, match="largest bucket"):
    bucket_size(13, (4, 8, 12), name="prompt length")
  with pytest.raises(ValueError, match="must be >= 1"):
    bucket_size(0)


def test_left_pad_and_positions():
  ids, mask = left_pad([[5, 6, 7], [9]], 4, pad_token_id=0)
  np.testing.assert_array_equal(ids, [[0, 5, 6, 7], [0, 0, 0, 9]])
  np.testing.assert_array_equal(mask, [[False, True, True, True], [False, False, False, True]])
  np.testing.assert_array_equal(positions_from_mask(mask), [[0, 0, 1, 2], [0, 0, 0, 0]])
  with pytest.raises(ValueError, match="prompt 1 is empty"):
    left_pad([[1], []], 4, pad_token_id=0)
  with pytest.raises(ValueError, match="5 tokens"):
    left_pad([[1] * 5], 4, pad_token_id=0)


def test_sampling_config_properties_and_validation():
  cfg = SamplingConfig(temperature=0.0, eos_token_ids=(2, 3), stop_token_ids=(3, 7))
  assert cfg.greedy and cfg.logp_temperature == 1.0
  assert cfg.all_stop_ids == (2, 3, 7)
  assert SamplingConfig(temperature=0.6).logp_temperature == 0.6
  hash(cfg)  # static argument of jit
  for bad in [dict(temperature=-0.1), dict(temperature=float("nan")), dict(top_k=-1),
              dict(top_p=0.0), dict(top_p=1.5), dict(max_new_tokens=0),
              dict(eos_token_ids=[2]), dict(stop_token_ids=(-1,)),
              dict(gen_len_buckets=(64, 32)), dict(batch_buckets=(0,))]:
    name = next(iter(bad))
    with pytest.raises((ValueError, TypeError), match=name):
      SamplingConfig(**bad)


def test_checked_prompts_names_the_bad_prompt():
  from botjax.sampling.output import checked_prompts
  assert checked_prompts([(3, 4), np.array([5])], 8) == [[3, 4], [5]]
  with pytest.raises(ValueError, match=r"prompt 1 holds token ids \[8, -1\] outside \[0, 8\)"):
    checked_prompts([[1], [8, 2, -1]], 8)
  with pytest.raises(ValueError, match="prompt 0 is empty"):
    checked_prompts([[]], 8)
