"""nplm-export (python -m nplm_jax.tools.export): a trained model in a plain format numpy alone reads;
a thin layer over nplm_jax.tools.export."""

import sys

from nplm_jax import cli as cli_lib
from nplm_jax.errors import UserError
from nplm_jax.tools import export as export_lib


def parse_args(argv=None):
  parser = cli_lib.ArgumentParser('nplm_jax.tools.export', description=export_lib.__doc__)
  parser.add_argument('--workdir', required=True, help='a training workdir with a best checkpoint')
  parser.add_argument('--output', required=True, help='the folder to write model.json and params.npz into (new)')
  return parser.parse_args(argv)


def main(argv=None) -> int:
  args = parse_args(argv)
  try:
    export_lib.export(args.workdir, args.output)
  except UserError as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  print(f'wrote model.json and params.npz to {args.output}')
  return 0


if __name__ == '__main__':
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('__main__')
