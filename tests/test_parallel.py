"""Runs tests/parallel_checks.py in a subprocess with 8 host CPU devices and reports each check.

XLA_FLAGS must be set before JAX initialises, so the checks cannot share this process.
"""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from nplm_jax.parallel import sharding

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPECTED_CHECKS = 83  # 1 fewer: the moving average's check and the bfloat16 moments' are one run


@pytest.fixture(scope='module')
def check_results(tmp_path_factory):
  report = str(tmp_path_factory.mktemp('parallel') / 'report.xml')
  flags = sharding.without_host_device_count()  # the suite's own flags kept
  env = dict(os.environ, XLA_FLAGS=f'{flags} --xla_force_host_platform_device_count=8'.strip(), JAX_PLATFORMS='cpu')
  proc = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', f'--junitxml={report}',
                         os.path.join('tests', 'parallel_checks.py')],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
  assert os.path.exists(report), proc.stdout + proc.stderr
  results = {}
  for case in ET.parse(report).getroot().iter('testcase'):
    failure = case.find('failure') if case.find('failure') is not None else case.find('error')
    skipped = case.find('skipped')
    results[case.get('name')] = ('failed', failure.text) if failure is not None else (
        ('skipped', skipped.get('message')) if skipped is not None else ('passed', ''))
  return results, proc.stdout[-4000:]


def test_all_parallel_checks_ran(check_results):
  results, output = check_results
  assert len(results) == EXPECTED_CHECKS, output
  assert all(status == 'passed' for status, _ in results.values()), output


@pytest.mark.parametrize('prefix', ['test_sharded_training_matches_dense', 'test_vocab_parallel_softmax_equals_dense',
                                    'test_train_step_never_gathers_the_vocabulary',
                                    'test_output_layer_bytes_split_over_the_model_axis',
                                    'test_bad_mesh_and_batch_shapes_are_one_line_errors',
                                    'test_checkpoint_moves_between_meshes', 'test_sampled_losses_match_dense',
                                    'test_the_deferred_weight_decay_on_meshes',
                                    'test_hidden_layers_split_on_model_match_one_device',
                                    'test_distant_block_split_on_model_matches_one_device',
                                    'test_tied_output_layer_is_padded_without_an_exchange_between_devices',
                                    'test_pallas_softmax_kernel_equals_dense', 'test_pallas_kernel_trains_as_the_xla_path'])
def test_parallel_check(check_results, prefix):
  results, _ = check_results
  mine = {name: r for name, r in results.items() if name.startswith(prefix)}
  assert mine, f'{prefix} did not run'
  failed = {name: detail for name, (status, detail) in mine.items() if status != 'passed'}
  assert not failed, failed
