"""Shared fixtures: the real corpora (paths from the environment .ci/run sets) and a tiny corpus."""

import importlib.metadata
import importlib.util
import os
import shutil
import tempfile

import pytest

# One persistent compilation cache for the suite and the commands its tests start: the same small
# programs (text.py:tiny's steps, above all) compile once instead of in each of about 150 processes
# (1.2x on the reliability tests, 2 cores). A fresh folder each test run, so nothing carries between
# runs; a cache the environment already names is used as it is (so pytest-xdist's workers, started
# after this, share their controller's).
_OWN_COMPILATION_CACHE = 'JAX_COMPILATION_CACHE_DIR' not in os.environ
if _OWN_COMPILATION_CACHE:
  os.environ['JAX_COMPILATION_CACHE_DIR'] = tempfile.mkdtemp(prefix='nplm_tests_compilation_cache_')
  os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')  # the tests' programs compile fast
  os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES', '0')


def _cpu_only() -> bool:
  """Whether JAX will run on the CPU alone: JAX_PLATFORMS=cpu (as .ci/run sets), or no accelerator plugin."""
  platforms = os.environ.get('JAX_PLATFORMS', '')
  if platforms:
    return platforms == 'cpu'
  # JAX finds a GPU's plugin by its entry point or its jax_plugins namespace package, a TPU's as libtpu
  return not (importlib.metadata.entry_points(group='jax_plugins') or importlib.util.find_spec('jax_plugins')
              or importlib.util.find_spec('libtpu'))


# On a CPU, XLA compiles the suite's programs without LLVM's optimisations (-O0): they are small and run for
# milliseconds, so compiling is most of a test's time (the fast subset: 420 s at XLA's default, 292 s at -O0,
# `-n 2` on 2 cores). XLA's own passes (fusion, layouts, sharding, collectives) are unchanged; a GPU's or TPU's
# programs compile as users get them. The commands the tests start inherit it.
_FAST_CPU_COMPILES = '--xla_backend_optimization_level=0'
if _cpu_only() and 'xla_backend_optimization_level' not in os.environ.get('XLA_FLAGS', ''):
  os.environ['XLA_FLAGS'] = f"{os.environ.get('XLA_FLAGS', '')} {_FAST_CPU_COMPILES}".strip()

from tests import corpora  # pylint: disable=g-import-not-at-top  # after the cache is named (it may import JAX)


# The fast subset (`python -m pytest -q -m fast tests`, about 5 minutes on 2 slow cores): the layers, configs,
# both model families against NumPy, the steps, the softmax kernels, shardings, memory estimates, the
# n-gram models, workdirs and results files; no training runs end to end, no subprocesses of commands.
FAST_MODULES = frozenset({'test_layout', 'test_config', 'test_model', 'test_revisited', 'test_steps',
                          'test_softmax_kernel', 'test_sharding', 'test_memory', 'test_ngram', 'test_workdir',
                          'test_results', 'test_experiments', 'test_docs'})


# The unit tier (`python -m pytest -q -m unit tests`, under a minute on 2 idle cores): the layers, configs, documents,
# results files and NumPy references, in-process: no command run as a subprocess, no training end to end, no
# multi-device fixture. A module named with None: all of its tests.
UNIT_TESTS = {
    'test_config': None, 'test_experiments': None, 'test_docs': None, 'test_results': None, 'test_memory': None,
    'test_layout': {'test_every_module_sits_in_a_known_layer', 'test_no_module_imports_from_a_layer_above_its_own',
                    'test_the_check_sees_an_upward_import',
                    'test_below_the_tools_only_a_main_block_reaches_the_command_layer'},
    'test_workdir': {'test_workdir_json_is_written_atomically_and_never_nan', 'test_local_workdirs_are_absolute',
                     'test_local_metrics_are_appended_not_rewritten', 'test_progress_rate_and_eta_count_training_time_only',
                     'test_damaged_metrics_lines_are_dropped_not_fatal',
                     'test_a_failed_write_is_one_line_and_leaves_no_temporary_file'},
    'test_ngram': {'test_modified_kneser_ney_bigram_by_hand', 'test_kneser_ney_matches_naive_reference',
                   'test_distributions_sum_to_one_and_match_stream_scores',
                   'test_em_never_lowers_the_validation_likelihood', 'test_mixture_is_never_worse_than_its_worse_part',
                   'test_a_large_stream_gets_an_eta_before_its_first_order'},
    'test_model': {'test_logits_match_numpy_equation', 'test_padding_columns_are_minus_infinity_and_real_ones_match',
                   'test_parameter_count_formula', 'test_unigram_bias_init_is_log_unigram',
                   'test_single_device_vocab_softmax_equals_dense_log_softmax',
                   'test_cosine_decay_falls_from_the_rate_after_the_warm_up_to_zero_and_stays'},
    'test_revisited': {'test_logits_equal_a_numpy_forward', 'test_reference_options_equal_the_numpy_forward',
                       'test_the_first_layer_added_to_the_last_vector_equals_the_numpy_forward',
                       'test_tied_output_layer_is_C_and_stores_only_the_bias',
                       'test_weight_decay_skips_biases_layer_norm_and_kernels'},
}


def pytest_configure(config):
  config.addinivalue_line('markers', 'fast: the fast subset of the suite (tests/conftest.py FAST_MODULES)')
  config.addinivalue_line('markers', 'unit: the unit tier, under a minute (tests/conftest.py UNIT_TESTS)')


def pytest_unconfigure(config):
  del config
  if _OWN_COMPILATION_CACHE:
    shutil.rmtree(os.environ['JAX_COMPILATION_CACHE_DIR'], ignore_errors=True)


def pytest_collection_modifyitems(items):
  for item in items:
    module = item.module.__name__.rpartition('.')[2]
    if module in FAST_MODULES:
      item.add_marker(pytest.mark.fast)
    if module in UNIT_TESTS and (UNIT_TESTS[module] is None or item.originalname in UNIT_TESTS[module]):
      item.add_marker(pytest.mark.unit)


def _data_path(variable: str, inside: str) -> str:
  path = os.environ.get(variable, '')
  if path and os.path.exists(os.path.join(path, inside)):
    return path
  message = f'{variable} must point at a folder holding {inside} (README, "Run the tests")'
  if os.environ.get('CI'):
    pytest.fail(message)  # in CI a missing corpus is a broken setup, never a skip
  pytest.skip(message)


@pytest.fixture(scope='session')
def nltk_data():
  return _data_path('NLTK_DATA', 'corpora/brown.zip')


@pytest.fixture(scope='session')
def ptb_dir():
  return _data_path('PTB_DIR', 'ptb.train.txt')


@pytest.fixture(scope='session')
def tiny_files(tmp_path_factory):
  """train/valid/test files of a small corpus with learnable structure."""
  return corpora.write_markov_corpus(str(tmp_path_factory.mktemp('tiny_corpus')))


@pytest.fixture
def tiny_config(tiny_files):
  return corpora.tiny_config(tiny_files)
