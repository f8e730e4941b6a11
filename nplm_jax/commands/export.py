"""nplm-export (python -m nplm_jax.tools.export): a trained model in a plain format numpy alone reads;
a thin layer over nplm_jax.tools.export."""

from nplm_jax import cli as cli_lib
from nplm_jax.files import trained_workdir

# JAX and the model code are imported in main(), after check_flags has answered a wrong flag or workdir.
TOOL = 'nplm_jax.tools.export'


def parse_args(argv=None):
  parser = cli_lib.ArgumentParser(TOOL, description=cli_lib.module_doc(TOOL))
  parser.add_argument('--workdir', required=True, help='a training workdir with a best checkpoint')
  parser.add_argument('--output', required=True, help='the folder to write model.json and params.npz into (new)')
  cli_lib.add_devices_flag(parser)
  return parser.parse_args(argv)


def check_flags(argv=None) -> None:
  """What is wrong with the command line's workdir, said before JAX loads (entry.run_command's early check)."""
  trained_workdir.check(parse_args(argv).workdir)


def main(argv=None) -> int:
  from nplm_jax.tools import export as export_lib  # pylint: disable=g-import-not-at-top
  args = parse_args(argv)
  export_lib.export(args.workdir, args.output, devices=args.devices)
  print(f'wrote model.json and params.npz to {args.output}')
  return 0


if __name__ == '__main__':
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('__main__', early='check_flags')
