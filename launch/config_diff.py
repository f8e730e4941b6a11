"""What each named best config changes from base_config, as a table per config in docs/configs.md:

  python -m launch.config_diff            # print the tables
  python -m launch.config_diff --write    # rewrite them in docs/configs.md (between <!-- config_diff --> marks)
  python -m launch.config_diff --check    # exit 1 when docs/configs.md differs (the tests run this)

A best config is several layers of variants (experiments/brown.py:best starts from a ladder row, which starts
from the regularised family ...); its table is the resolved result, key by key, against the defaults.
"""

import argparse
import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS_MD = os.path.join(REPO, 'docs', 'configs.md')
BESTS = ('experiments/brown.py:mlp1_tuned', 'experiments/brown.py:best', 'experiments/ptb.py:best',
         'experiments/ptb.py:char_best', 'experiments/text.py:quick')
# Keys that name the run or where its data is, not how it trains.
LEFT_OUT = ('name', 'data.path')
_SECTION = re.compile(r'(<!-- config_diff -->\n)(.*?)(<!-- /config_diff -->)', re.S)


def leaves(tree: dict, prefix: str = '') -> dict:
  """A nested dict's leaves by dotted key: {'train.batch_size': 128, ...}."""
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out.update(leaves(value, f'{prefix}{key}.'))
    else:
      out[f'{prefix}{key}'] = value
  return out


def differences(name: str) -> list[tuple[str, object, object]]:
  """(key, default, the config's value) for every key the named config sets otherwise than base_config."""
  import nplm_jax  # pylint: disable=g-import-not-at-top
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  base = leaves(json.loads(config_lib.base_config().to_json()))
  named = leaves(json.loads(nplm_jax.get_config(name).to_json()))
  return [(k, base.get(k), v) for k, v in sorted(named.items()) if base.get(k) != v and k not in LEFT_OUT]


def rendered() -> str:
  parts = []
  for name in BESTS:
    rows = [f'| {k} | `{default!r}` | `{value!r}` |' for k, default, value in differences(name)]
    parts.append(f'`{name}`:\n\n| key | default | this config |\n| --- | --- | --- |\n' + '\n'.join(rows) + '\n')
  return '\n'.join(parts) + '\nRendered by `python -m launch.config_diff --write`.\n'


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='python -m launch.config_diff', description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--write', action='store_true')
  parser.add_argument('--check', action='store_true')
  args = parser.parse_args(argv)
  with open(CONFIGS_MD, encoding='utf-8') as f:
    text = f.read()
  new = _SECTION.sub(lambda m: m.group(1) + rendered() + m.group(3), text)
  if args.check:
    if new != text:
      print('error: docs/configs.md differs from the configs; run python -m launch.config_diff --write', file=sys.stderr)
      return 1
    print('docs/configs.md matches the configs')
  elif args.write:
    with open(CONFIGS_MD, 'w', encoding='utf-8') as f:
      f.write(new)
    print('rewrote docs/configs.md' if new != text else 'docs/configs.md was up to date')
  else:
    print(rendered())
  return 0


if __name__ == '__main__':
  sys.exit(main())
