"""Any recorded run again, from its results file: nplm-train --config=experiments/recorded.py:results/NAME.json

A results file written by python -m launch.results collect keeps the run's whole resolved config, so the
run trains again by this one command, whether or not its config still has a name in brown.py, ptb.py or
text.py. A transcribed file (its `transcribed` field: figures copied from RESULTS.md as first written, the
run's own results.json not kept) holds a config rebuilt from the experiment files afterwards, at the commit
its `config_rebuilt_at` names: what that config trains is the named experiment as it was then, not
necessarily the run that gave the figures. Keys newer than the run take the value that
keeps its behaviour where a default changed since (config.LEGACY_DEFAULTS), else today's default
(config.from_saved). The corpus is found as the experiment files find it: a data.path that does not
exist here is replaced by $PTB_DIR for PTB runs; the workdir defaults to runs/ and the results file's
name. Add --config.KEY=VALUE to change anything (--config.seed=1 for another seed).
"""

import json
import os

from nplm_jax.config import from_saved
from nplm_jax.errors import UserError


def get_config(results_file: str = ''):
  if not results_file:
    raise UserError('experiments/recorded.py needs a results file: --config=experiments/recorded.py:results/NAME.json')
  if not os.path.isfile(results_file):
    raise UserError(f'no such results file: {results_file} (give one of results/*.json)')
  try:
    with open(results_file, encoding='utf-8') as f:
      record = json.load(f)
    if record.get('kind') == 'ngram':
      raise UserError(f'{results_file} records an n-gram baseline, not a training; nplm-ngram gives it again '
                      f'(its command: {record.get("command", "?")})')
    saved = record['config']
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise UserError(f'{results_file} is not a results file with a config ({type(e).__name__}: {e}); give one of '
                    'results/*.json') from None
  config = from_saved(saved)
  config.name = record.get('name') or os.path.basename(results_file)[:-len('.json')]  # its own runs/ folder
  if config.data.corpus == 'ptb' and not os.path.isdir(config.data.path):
    config.data.path = os.environ.get('PTB_DIR', '')
  return config
