"""Shared fixtures: the real corpora (paths from the environment .ci/run sets) and a tiny corpus."""

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
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


# On a CPU, XLA compiles the suite's programs without LLVM's optimisations (-O0) and with its older CPU
# emitters, whose code is quicker to make: the programs are small and run for milliseconds, so compiling is
# most of a test's time (docs/development.md, "The test suite"). Sharding and collectives are unchanged; the
# machine code and the form of a few operations (a gather's result shape) differ, and checks that two programs
# give the same bits compile as users' runs do (tests/test_steps.py). A GPU's or TPU's programs compile as users
# get them. The commands the tests start inherit the flags.
_FAST_CPU_COMPILES = '--xla_backend_optimization_level=0'
_OLDER_CPU_EMITTERS = '--xla_cpu_use_fusion_emitters=false'


def _xla_knows(flag: str) -> bool:
  """Whether the installed XLA starts with `flag` (an unknown flag stops it with a fatal error)."""
  probe = subprocess.run([sys.executable, '-c', 'import jax; jax.devices("cpu")'], capture_output=True, timeout=300,
                         env=dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {flag}", JAX_PLATFORMS='cpu'))
  return probe.returncode == 0


if _cpu_only() and 'xla_backend_optimization_level' not in os.environ.get('XLA_FLAGS', ''):
  flags = [_FAST_CPU_COMPILES] + ([_OLDER_CPU_EMITTERS] if _xla_knows(_OLDER_CPU_EMITTERS) else [])
  os.environ['XLA_FLAGS'] = ' '.join([os.environ.get('XLA_FLAGS', ''), *flags]).strip()

from tests import corpora  # pylint: disable=g-import-not-at-top  # after the cache is named (it may import JAX)


def pytest_unconfigure(config):
  del config
  if _OWN_COMPILATION_CACHE:
    shutil.rmtree(os.environ['JAX_COMPILATION_CACHE_DIR'], ignore_errors=True)


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
